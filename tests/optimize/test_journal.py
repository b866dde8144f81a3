"""The shared search's journal: line format, damage, locking errors and the pure fold (leases with a clock)."""
from __future__ import annotations

import errno
import fcntl

import pytest

from nnlo.contract import SEARCH_JOURNAL
from nnlo.errors import ConfigError
from nnlo.optimize.journal import Journal, decode, encode, read_journal, rebuild
from nnlo.optimize.results import Objective


def rec(kind, p="a", t=0.0, **kw):
    return {"kind": kind, "p": p, "t": t, **kw}


def result(tid, p="a", fom=1.0, params=None):
    return rec("result", p, id=tid, trial={"id": tid, "params": params or {"x": tid}, "status": "ok", "fom": fom})


def write(folder, records):
    j = Journal(folder)
    with j.locked():
        j.read_new()
        for r in records:
            j.append(r)
    j.close()


def test_a_line_round_trips_and_any_change_is_detected():
    r = rec("propose", id=3, params={"lr": 0.1, "name": "é"}, until=5.0)
    line = encode(r)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line[:-1]) == r
    for i in range(len(line) - 1):  # flip every byte: never accepted as a (different) record
        damaged = line[:i] + bytes([line[i] ^ 0x01]) + line[i + 1:-1]
        out = decode(damaged)
        assert isinstance(out, str) or out == r
    assert isinstance(decode(line[:-10]), str)  # truncated


def test_damaged_journal_resumes_from_the_valid_records_and_names_what_it_skipped(tmp_path):
    write(tmp_path, [rec("propose", id=0, params={"x": 0}, until=9.0), result(0),
                     rec("propose", id=1, params={"x": 1}, until=9.0)])
    path = tmp_path / SEARCH_JOURNAL
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    # a garbage line in the middle, and the last record truncated (a writer killed mid-write)
    path.write_bytes(lines[0] + b"garbage \x00\xff here\n" + lines[1] + lines[2][:25])
    records, skipped = read_journal(tmp_path)
    assert [r["kind"] for r in records] == ["propose", "result"]
    assert [(s.line, s.reason.split(" (")[0]) for s in skipped] == [(2, "not a journal record"),
                                                                    (4, "incomplete last record")]
    assert "line 4" in skipped[1].describe(path) and "skipped" in skipped[1].describe(path)
    # a writer resumes: it reads the valid records, closes the torn line, and its record is intact
    j = Journal(tmp_path)
    with j.locked():
        new, skipped2 = j.read_new()
        assert len(new) == 2 and len(skipped2) == 2
        j.append(rec("propose", id=1, params={"x": 1}, until=9.0))
    with j.locked():
        assert j.read_new() == ([], [])
    j.close()
    records, skipped = read_journal(tmp_path)
    assert [r["kind"] for r in records] == ["propose", "result", "propose"]
    assert [s.line for s in skipped] == [2, 4]  # the torn line stays skipped, the new record is line 5
    assert path.read_bytes().splitlines()[4] == encode(records[2]).rstrip(b"\n")
    state = rebuild(records)
    assert sorted(state.finished) == [0] and sorted(state.open) == [1] and state.next_id == 2


def test_a_reader_without_the_lock_leaves_a_record_under_way_for_later(tmp_path):
    write(tmp_path, [rec("join")])
    with open(tmp_path / SEARCH_JOURNAL, "ab") as f:
        f.write(encode(rec("leave"))[:20])
    j = Journal(tmp_path)
    records, skipped = j.read_new()  # not holding the lock: the tail may still be being written
    assert [r["kind"] for r in records] == ["join"] and skipped == []
    assert read_journal(tmp_path, final=False) == (records, [])
    (tmp_path / SEARCH_JOURNAL).write_bytes(b"")  # another program truncates it: one line, not a traceback
    with pytest.raises(ConfigError, match=r"shrank from .* to 0 bytes"):
        j.read_new()
    j.close()


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS])
def test_a_file_system_without_locks_is_one_line_naming_the_requirement(tmp_path, monkeypatch, code):
    def no_flock(fd, op):  # the file system's answer (Lustre without -o flock, some NFS setups)
        raise OSError(code, "locks unavailable")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    j = Journal(tmp_path)
    with pytest.raises(ConfigError) as e, j.locked():
        pass
    msg = str(e.value)
    assert "\n" not in msg and "flock" in msg and "Lustre" in msg and "-o flock" in msg and str(tmp_path) in msg
    j.close()


def test_append_refuses_to_write_on_a_stale_view(tmp_path):
    write(tmp_path, [rec("join")])
    j = Journal(tmp_path)
    with j.locked(), pytest.raises(RuntimeError, match="read_new"):
        j.append(rec("join", p="b"))
    with pytest.raises(RuntimeError, match="outside"):
        j.append(rec("join", p="b"))
    j.close()


# -- the fold ------------------------------------------------------------------------------------------------
def test_leases_expire_by_the_clock_and_are_taken_over_once():
    s = rebuild([rec("propose", "a", id=0, params={"x": 0}, until=100.0),
                 rec("propose", "b", id=1, params={"x": 1}, until=100.0)])
    assert s.claimable(50.0, "c") == []  # both alive
    assert [x.id for x in s.claimable(50.0, "a")] == [0]  # a's own (a resubmitted job of a) ...
    assert s.claimable(50.0, "a", running=[0]) == []  # ... unless a runs it now
    assert [x.id for x in s.claimable(100.5, "c")] == [0, 1]  # both expired
    s.apply(rec("renew", "b", ids=[1], until=200.0))
    s.apply(rec("renew", "c", ids=[0], until=300.0))  # not c's lease: no effect
    assert [x.id for x in s.claimable(150.0, "c")] == [0]
    assert [x.id for x in s.held_by_others(150.0, "c")] == [1]
    assert s.apply(rec("lease", "c", id=0, until=250.0, **{"from": "a"}))
    assert s.open[0].holder == "c" and s.claimable(150.0, "d") == []
    assert not s.apply(rec("release", "a", id=0))  # a lost it: a's release changes nothing
    # a's late result still counts (first result); c's later one does not
    assert s.apply(result(0, "a", fom=3.0)) and not s.apply(result(0, "c", fom=1.0))
    assert s.finished[0].fom == 3.0 and 0 not in s.open
    assert not s.apply(rec("lease", "d", id=0, until=999.0))  # finished: not leasable
    assert s.apply(rec("release", "b", id=1)) and [x.id for x in s.claimable(0.0, "z")] == [1]
    assert s.n_trials == 2 and s.next_id == 2 and s.ignored == 4
    assert s.counts(0.0) == {"done": 1, "ok": 1, "failed": 0, "running": 0, "expired": 0, "pool": 1}
    s.apply(rec("lease", "z", id=1, until=10.0))
    assert s.counts(5.0)["running"] == 1 and s.counts(11.0)["expired"] == 1


def test_ids_are_proposed_once_and_a_lost_proposal_is_recovered_from_its_result():
    s = rebuild([rec("propose", id=0, params={"x": 0}, until=1.0),
                 rec("propose", "b", id=0, params={"x": 9}, until=1.0),  # a second proposal of id 0: ignored
                 result(2, "b", params={"x": 2})])  # the proposal of 2 (and 1) lost to damage
    assert s.open[0].params == {"x": 0} and s.next_id == 3 and sorted(s.finished) == [2]
    assert not s.apply(rec("propose", id=1, params={}, until=1.0))  # below next_id: never reused


def test_observations_follow_journal_order_and_the_objective_direction():
    s = rebuild([result(1, fom=0.5), result(0, fom=0.9),
                 rec("result", id=2, trial={"id": 2, "params": {"x": 2}, "status": "failed", "fom": None})])
    assert s.observations(Objective("acc", "max")) == [({"x": 1}, -0.5), ({"x": 0}, -0.9), ({"x": 2}, None)]
    assert [t.id for t in s.results()] == [1, 0, 2]


def test_malformed_records_are_ignored_not_fatal():
    s = rebuild([{"kind": "propose"}, {"kind": "lease", "id": "x"}, {"kind": "renew", "ids": None},
                 {"kind": "mystery"}, rec("search", spec={"n": 1}), rec("search", spec={"n": 2})])
    assert s.header == {"n": 1} and s.n_trials == 0 and s.ignored == 5


@pytest.mark.parametrize("seed", range(20))
def test_fuzzed_damage_never_yields_a_record_that_was_not_written(tmp_path, seed):
    import random

    rng = random.Random(seed)
    written = [rec("propose", id=i, params={"x": rng.random(), "s": "ab" * rng.randrange(50)}, until=1.0)
               for i in range(30)]
    lines = [encode(r) for r in written]
    damaged: list[bytes] = []
    intact: list[dict] = []
    for r, line in zip(written, lines, strict=True):
        what = rng.random()
        if what < 0.1:  # random bytes (maybe with newlines) before the record
            damaged.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) + b"\n")
        if what < 0.2 and len(line) > 3:  # the record cut short, then the next line begins
            damaged.append(line[:rng.randrange(1, len(line) - 2)] + b"\n")
            continue
        if what < 0.3:  # one byte changed
            i = rng.randrange(len(line) - 1)
            damaged.append(line[:i] + bytes([rng.randrange(256)]) + line[i + 1:])
            continue
        damaged.append(line)
        intact.append(r)
    if rng.random() < 0.5:  # a torn last record
        damaged.append(lines[0][:rng.randrange(1, len(lines[0]) - 1)])
    (tmp_path / SEARCH_JOURNAL).write_bytes(b"".join(damaged))
    records, skipped = read_journal(tmp_path)
    assert all(r in written for r in records)  # nothing accepted that was not written whole
    assert [r for r in records if r in intact] == intact  # every undamaged record kept, in order
    assert len(records) + len(skipped) >= len(intact)


def test_a_lease_runs_until_its_time_and_expires_only_after_it():
    """``until`` is the last moment the lease holds: at ``now == until`` it is still the holder's."""
    s = rebuild([rec("propose", "a", id=0, params={"x": 0}, until=100.0)])
    lease = s.open[0]
    assert not lease.expired(99.0) and not lease.expired(100.0) and lease.expired(100.001)
    assert s.claimable(100.0, "c") == [] and [x.id for x in s.held_by_others(100.0, "c")] == [0]
    assert [x.id for x in s.claimable(100.001, "c")] == [0] and s.held_by_others(100.001, "c") == []
    assert s.counts(100.0) == {"done": 0, "ok": 0, "failed": 0, "running": 1, "expired": 0, "pool": 0}
    assert s.counts(101.0) == {"done": 0, "ok": 0, "failed": 0, "running": 0, "expired": 1, "pool": 0}
    assert s.held_by_others(50.0, "a") == []  # one's own lease is never "held by others"
    s.apply(rec("release", "a", id=0))
    assert (lease.holder, lease.until) == (None, None) and not lease.expired(1e18)  # the pool never expires


def test_every_kind_of_record_applies_or_is_counted_as_ignored():
    s = rebuild([rec("search", spec={"budget": 3}), rec("search", spec={"budget": 9}),  # the first header wins
                 rec("join", "a", t=1.0, host="n1"), rec("join", "b"), rec("leave", "a", t=2.0, rc=0),
                 rec("propose", "a", id=0, params={"x": 0}, until=10.0),
                 rec("propose", "a", id=2, params={"x": 2}, until=10.0),  # ids may skip ahead
                 rec("propose", "a", id=1, params={"x": 1}, until=10.0),  # ... but never go back
                 rec("renew", "b", ids=[0], until=50.0),  # not b's lease
                 rec("renew", "a", ids=[0, 2, 7], until=40.0),
                 rec("lease", "b", id=7, until=1.0),  # no such trial
                 rec("bogus", "a", id=0), rec("propose", "a", params={}),  # unknown kind; no id
                 result(2, "a", fom=0.5, params={"x": 2}),
                 rec("result", "a", id=3, trial={"id": 3, "status": "failed", "params": {"x": 3}}),  # lost proposal
                 ])
    assert s.header == {"budget": 3}
    assert s.participants == {"a": {"t": 2.0, "host": "n1", "rc": 0, "state": "leave"},
                              "b": {"t": 0.0, "state": "join"}}
    assert sorted(s.open) == [0] and s.open[0].until == 40.0 and s.open[0].params == {"x": 0}
    assert s.order == [2, 3] and s.next_id == 4 and s.n_trials == 3
    assert [t.id for t in s.results()] == [2, 3] and s.results()[1].status == "failed"
    assert s.ignored == 6
    assert s.counts(20.0) == {"done": 2, "ok": 1, "failed": 1, "running": 1, "expired": 0, "pool": 0}
    obj = Objective("val_loss", "min")
    assert s.observations(obj) == [({"x": 2}, 0.5), ({"x": 3}, None)]
    assert s.observations(Objective("val_loss", "max")) == [({"x": 2}, -0.5), ({"x": 3}, None)]


# -- lines, exactly ------------------------------------------------------------------------------------------
def test_a_line_is_the_checksum_and_the_sorted_compact_record():
    import zlib

    body = b'{"a":[1,2],"kind":"join","p":"x"}'
    assert encode({"p": "x", "kind": "join", "a": (1, 2)}) == b'{"crc":"%08x","rec":%s}\n' % (zlib.crc32(body), body)
    with pytest.raises(ValueError):
        encode(rec("join", score=float("nan")))  # never a NaN in the journal
    import numpy as np

    assert b'"v":[1.5,2]' in encode({"kind": "x", "v": [np.float32(1.5), np.int64(2)]})  # numpy values as numbers


def test_why_a_line_is_not_a_record():
    import zlib

    def line(body: bytes, crc: int | None = None) -> bytes:
        return b'{"crc":"%08x","rec":%s}' % (zlib.crc32(body) if crc is None else crc, body)

    assert decode(line(b'{"kind":"join"}') + b"\r") == {"kind": "join"}  # a CRLF line
    assert decode(line(b'{"kind":"join"}', 0)) == "checksum mismatch (torn or altered record)"
    assert decode(line(b"{kind}")) == "not JSON"
    assert decode(line(b"[1]")) == "not a journal record"
    assert decode(line(b'{"kind":3}')) == "not a journal record"
    assert decode(line(b'{"p":"a"}')) == "not a journal record"
    assert decode(b"") == "not a journal record" and decode(line(b'{"kind":"a"}') + b" ") == "not a journal record"


def test_parsing_counts_lines_and_bytes_and_leaves_a_line_under_way():
    from nnlo.optimize.journal import parse

    a, b = encode(rec("join", "a")), encode(rec("join", "b"))
    data = a + b"\n  \n" + b"junk\n" + b[:-1]
    records, skipped, used = parse(data, start_line=10, start_offset=100)
    assert [r["p"] for r in records] == ["a"] and used == len(data)
    assert [(s.line, s.offset, s.reason) for s in skipped] == [
        (13, 100 + len(a) + 4, "not a journal record"),
        (14, 100 + len(a) + 9, "incomplete last record (its writer was killed mid-write)")]
    assert skipped[0].preview == "junk" and skipped[1].describe("J") == (
        f"J line 14 (byte {100 + len(a) + 9}): incomplete last record (its writer was killed mid-write), "
        f"skipped: {b[:-1][:60].decode()!r}")
    records, skipped, used = parse(data, final=False)  # the last line may still be being written: left
    assert [r["p"] for r in records] == ["a"] and used == len(data) - len(b) + 1
    assert [(s.line, s.offset) for s in skipped] == [(4, len(a) + 4)]  # counted from line 1, byte 0
    assert parse(b"") == ([], [], 0) and parse(a, final=False) == ([rec("join", "a")], [], len(a))
    long = b"x" * 100 + b"\n"
    assert parse(long)[1][0].preview == "x" * 60


def test_journal_files_errors_and_growth(tmp_path):
    from nnlo.optimize.journal import lock_error

    assert read_journal(tmp_path / "none") == ([], [])
    err = lock_error(tmp_path / "l", OSError(errno.ENOLCK, "No locks available"))
    assert str(err) == (f"cannot lock {tmp_path / 'l'} (No locks available): a shared search needs file locks "
                        "(flock) that hold across nodes on its --output file system (GPFS, NFSv4, Lustre mounted "
                        "with -o flock, or a local disk for jobs on one node); choose an --output on such a file "
                        "system or ask the admins to mount it with flock")
    (tmp_path / "file").write_text("x")
    j = Journal(tmp_path / "file" / "sub")
    with pytest.raises(ConfigError, match=r"^cannot open the search journal .*/file/sub/search-journal\.jsonl: "
                                          r"Not a directory; choose another --output$"):
        with j.locked():
            pass
    write(tmp_path, [rec("join"), rec("leave")])
    j = Journal(tmp_path, fsync=False)
    assert not j.holding and j.read_new()[0] == [rec("join"), rec("leave")] and j.read_new() == ([], [])
    with j.locked():
        assert j.holding
        with j.locked():  # re-entrant
            assert j.holding
        assert j.holding
        assert j.append(rec("join", "b")) == rec("join", "b")
    assert not j.holding
    (tmp_path / SEARCH_JOURNAL).write_bytes(b"")
    with pytest.raises(ConfigError, match=r"shrank from \d+ to 0 bytes while the search ran \(truncated, replaced "
                                          r"or removed by another program\); restore it, or start a new search in "
                                          r"another --output$"):
        j.read_new()
    j.close()
    j.close()  # twice: nothing left to close


def test_incremental_reads_and_appends_keep_line_numbers_and_offsets(tmp_path):
    path = tmp_path / SEARCH_JOURNAL
    a, b, c = encode(rec("join", "a")), encode(rec("join", "b")), encode(rec("join", "c"))
    path.write_bytes(a + b[:10])
    j = Journal(tmp_path, fsync=False)
    assert j.read_new() == ([rec("join", "a")], [])  # without the lock the partial line may be under way: it waits
    with open(path, "ab") as f:
        f.write(b[10:] + b"junk\n" + c)
    records, skipped = j.read_new()
    assert records == [rec("join", "b"), rec("join", "c")]
    assert [(s.line, s.offset, s.preview) for s in skipped] == [(3, len(a) + len(b), "junk")]
    torn_at = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b'{"crc":"0')  # a writer killed mid-line
    with j.locked():
        records, skipped = j.read_new()
        assert records == [] and [(s.line, s.offset, s.reason) for s in skipped] == [
            (5, torn_at, "incomplete last record (its writer was killed mid-write)")]
        j.append(rec("leave", "a"))  # closes the torn line first
        j.append(rec("leave", "b"))
    with open(path, "ab") as f:
        f.write(b"more junk\n")
    records, skipped = j.read_new()
    assert records == [] and [(s.line, s.offset) for s in skipped] == [(8, path.stat().st_size - 10)]
    assert path.read_bytes().splitlines()[5:7] == [encode(rec("leave", "a"))[:-1], encode(rec("leave", "b"))[:-1]]
    other = Journal(tmp_path, fsync=False)  # a fresh reader agrees on every line
    records, skipped = other.read_new()
    assert [r["p"] for r in records] == ["a", "b", "c", "a", "b"] and [s.line for s in skipped] == [3, 5, 8]
    j.close()


def test_a_reader_skips_the_newline_another_writer_used_to_close_a_torn_line(tmp_path):
    from nnlo.optimize.journal import parse

    assert parse(b"\n" + encode(rec("join"))) == ([rec("join")], [], len(encode(rec("join"))) + 1)
    path = tmp_path / SEARCH_JOURNAL
    path.write_bytes(encode(rec("join", "a")) + b'{"crc":"1')
    reader, writer = Journal(tmp_path, fsync=False), Journal(tmp_path)
    assert writer.fsync is True and reader.fsync is False
    with reader.locked():
        assert [s.line for s in reader.read_new()[1]] == [2]  # torn: reported once
    with writer.locked():
        writer.read_new()
        writer.append(rec("join", "b"))  # writes "\n" + its record
    assert reader.read_new() == ([rec("join", "b")], [])  # the closing newline is no new (blank) line
    with reader.locked():
        assert reader.read_new() == ([], [])
        reader.append(rec("join", "c"))
    assert [r["p"] for r in read_journal(tmp_path)[0]] == ["a", "b", "c"]
    assert [s.line for s in read_journal(tmp_path)[1]] == [2]
    reader.close()
    writer.close()


def test_journal_edges(tmp_path):
    assert Journal(tmp_path / "none").read_new() == ([], [])  # no journal yet: nothing, not an error
    deep = Journal(tmp_path / "a" / "b", fsync=False)
    with deep.locked():
        deep.read_new()
        deep.append(rec("join"))
    assert (tmp_path / "a" / "b" / SEARCH_JOURNAL).is_file()
    with open(tmp_path / "a" / "b" / SEARCH_JOURNAL, "ab") as f:
        f.write(b"xy")
    with deep.locked(), pytest.raises(RuntimeError, match=r"^.*search-journal\.jsonl: 2 unread byte\(s\); read_new\(\) "
                                                          r"first$"):
        deep.append(rec("join"))
    with pytest.raises(RuntimeError, match=r"^Journal\.append outside Journal\.locked\(\)$"):
        deep.append(rec("join"))
    deep.close()
    s = rebuild([{"kind": "join", "t": 1.0}])  # a record without a participant
    assert s.participants == {"": {"t": 1.0, "state": "join"}}
