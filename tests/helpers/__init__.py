"""What the tests share: fixtures, the warm MPI world, the private Slurm, stand-ins, fault tools, data writers.

A package (imported as ``tests.helpers.<module>``), never ``conftest`` imported by name and never a folder put on
``sys.path`` by hand: programs the tests start (stand-ins, job payloads) import it the same way, with the
checkout on ``PYTHONPATH``. See docs/testing.md.
"""
