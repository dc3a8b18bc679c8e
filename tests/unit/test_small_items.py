"""Small items of a researcher's day (issue 25): one-line errors that name the key."""
import pytest

from ssgd.errors import ConfigError
from ssgd.run import build
from tests.conftest import make_cfg


@pytest.mark.parametrize("override,match", [("optimizer.momentum=abc", r"optimizer\.momentum=abc: must be a number"),
                                            ("optimizer.weight_decay=true", r"optimizer\.weight_decay=True: must be")])
def test_a_non_number_optimizer_setting_names_its_key(override, match):
    with pytest.raises(ConfigError, match=match):
        build.spec(make_cfg(override))


def test_numbers_of_either_kind_pass():
    build.spec(make_cfg("optimizer.momentum=0.9", "optimizer.weight_decay=0"))
