"""In CI (NNLO_REQUIRE_HOROVOD=1, set by scripts/test.sh) the Horovod engine must be built and importable,
so that its tests really run there instead of taking their "not installed" branch."""
import os

import pytest

from nnlo.allreduce.choose import available_engines


@pytest.mark.skipif(not os.environ.get("NNLO_REQUIRE_HOROVOD"), reason="only where Horovod is required (CI)")
def test_horovod_engine_is_available_where_required():
    assert "horovod" in available_engines(), "scripts/install-horovod.sh did not leave an importable horovod.torch"
