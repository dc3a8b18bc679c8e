"""`cluster.compute_profile`: a user's profile file is the target's compute (ssgd.run.target_profile).

The oracle is the iteration model (`ssgd.perf.iteration.iteration_time`, no overlap) on the same
hand-written profile of FNN-3's d at the run's batch and on the run's network: the trainer's target clock
must give its time, the same bytes must give the same target/* to the digit, and a file that is missing,
not a profile or of another d is refused in one line naming the key before anything is built.
"""
import hashlib
import json
from pathlib import Path

import pytest

from ssgd.errors import ConfigError
from ssgd.perf.alphabeta import AlphaBeta
from ssgd.perf.iteration import Profile, iteration_time, rescale_batch
from ssgd.run import build
from ssgd.run.final_lines import final_lines
from ssgd.tools.scheme_costs import scheme
from tests.conftest import make_cfg, train

FNN3_D = 157_000 + 40_200 + 2_010              # 784-200-200-10 with biases: FNN-3's trainable parameters
RUN = ("cluster=4x1gbe", "trainer.batch_size=16", "trainer.max_steps=2", "compressor.density_warmup=[]",
       "trainer.eval_every=1000")
# a hand-written profile at batch 32 (the run uses 16: every batch-proportional time halves)
PROFILE = {"format": 1, "name": "fnn3-handwritten", "batch_size": 32, "layers": ["net.5", "net.3", "net.1"],
           "params": [2_010, 40_200, 157_000], "forward_s": [1e-3, 2e-3, 4e-3], "backward_s": [2e-3, 4e-3, 8e-3],
           "io_s": 5e-4, "h2d_s": 2.5e-4, "update_s": 3e-3, "select_s": 5e-3, "threshold_select_s": 1e-3,
           "derivation": "hand-written for the tests"}


def write(tmp_path: Path, data: object, name: str = "fnn3.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def target_of(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k.startswith("target/") or k == "throughput/target"}


def test_the_target_time_is_the_iteration_model_s_on_the_users_profile(tmp_path):
    path = write(tmp_path, PROFILE)
    summary, _ = train(tmp_path / "run", *RUN, f"cluster.compute_profile={path}")
    assert summary["params"] == FNN3_D
    profile = Profile.from_dict(PROFILE)
    expected = iteration_time(rescale_batch(profile, 16), scheme("gtopk", FNN3_D),
                              AlphaBeta(alpha=4.36e-4, beta=9.0e-9), 4)
    assert summary["target/compute_s"] == pytest.approx(0.5 * (5e-4 + 2.5e-4 + 7e-3 + 14e-3), rel=1e-12)
    assert summary["target/compress_s"] == 5e-3 and summary["target/update_s"] == 3e-3   # gtopk: exact top-k
    assert summary["target/comm_s"] == pytest.approx(expected.comm_s, rel=1e-12)
    assert summary["target/iter_s"] == pytest.approx(expected.total_s, rel=1e-12)
    assert summary["throughput/target"] == pytest.approx(4 * 16 / expected.total_s, rel=1e-12)
    assert summary["target/profile"] == "fnn3-handwritten"
    assert summary["target/profile_file"] == str(path.resolve())
    assert summary["target/profile_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert f"(fnn3-handwritten profile from cluster.compute_profile={path.resolve()})" in final_lines(summary)


def test_the_same_profile_file_gives_the_same_target_numbers_to_the_digit(tmp_path):
    path = write(tmp_path, PROFILE)
    first, _ = train(tmp_path / "a", *RUN, f"cluster.compute_profile={path}")
    again, _ = train(tmp_path / "b", *RUN, f"cluster.compute_profile={path}", "threads=1")
    assert target_of(first) == target_of(again) and "target/iter_s" in target_of(first)
    assert first["time/step_s"] > 0 and again["time/step_s"] > 0          # this host's clock: measured, free to differ


def test_without_the_key_fnn3_has_no_target_compute_and_says_how_to_get_one(tmp_path):
    summary, _ = train(tmp_path, *RUN)
    assert "target/iter_s" not in summary and "target/profile" not in summary and summary["target/comm_s"] > 0
    assert "cluster.compute_profile=FILE" in final_lines(summary)


def test_a_shipped_d_is_overridden_by_the_key(tmp_path):
    """A user's profile wins over the shipped one of the same d (here both describe resnet20's d)."""
    from ssgd.perf import profiles
    from ssgd.perf.target import target_compute

    shipped = profiles.load("resnet20")
    mine = Profile.from_dict({**shipped.to_dict(), "name": "mine", "update_s": 1.0})
    assert target_compute(shipped.d, shipped.batch_size, "none").profile == "resnet20"
    assert target_compute(shipped.d, shipped.batch_size, "none", mine).update_s == 1.0
    with pytest.raises(ValueError, match="describes d = "):
        target_compute(shipped.d + 1, 32, "none", mine)


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("{not json", "not a compute profile (not JSON"),
    ({"name": "x"}, "not a compute profile (profile: missing keys"),
    ({**PROFILE, "forward_s": [1e-3]}, "not a compute profile (profile 'fnn3-handwritten': forward_s has 1 entries"),
    ([1, 2], "not a compute profile (profile: expected a JSON object"),
])
def test_a_bad_file_is_refused_naming_the_key_before_anything_is_built(tmp_path, content, message):
    path = tmp_path / "p.json" if content is None else write(tmp_path, content)
    with pytest.raises(ConfigError) as err:
        build.spec(make_cfg(*RUN, f"cluster.compute_profile={path}"))
    text = str(err.value)
    assert text.startswith(f"cluster.compute_profile='{path}': ") and message in text and "\n" not in text


def test_a_profile_of_another_d_is_refused_before_any_rank_starts(tmp_path):
    path = write(tmp_path, {**PROFILE, "params": [2_010, 40_200, 157_001]})
    s = build.spec(make_cfg(*RUN, f"cluster.compute_profile={path}"))
    with pytest.raises(ConfigError, match=r"^cluster.compute_profile='.*': profile 'fnn3-handwritten' describes a "
                                          r"model of 199,211 parameters, this run's model has 199,210 "):
        build.preflight(s)


def test_the_built_model_s_d_is_checked_too(tmp_path):
    """Where preflight cannot size the model (the user's own data), building it checks d (same one line)."""
    from ssgd.run import target_profile

    user = target_profile.read(str(write(tmp_path, PROFILE)))
    assert target_profile.compute(user, FNN3_D, 32, "linear").compress_s == 1e-3            # Gaussian-k's kind
    with pytest.raises(ConfigError, match=r"^cluster.compute_profile=.* describes a model of 199,210 parameters, "
                                          r"this run's model has 199,209 "):
        target_profile.compute(user, FNN3_D - 1, 32, "linear")
