"""Real data sets read from files a package installed: never downloaded at run time.

* :func:`load_digits` / ``digits.load_data()``: scikit-learn's bundled 8x8
  handwritten digits (1,797 images), split into a fixed train and test set.
* ``fashion_mnist.load_data()``: Fashion-MNIST (70,000 28x28 images) from its IDX
  files, as Debian's ``dataset-fashion-mnist`` package installs them
  (``/usr/share/datasets/fashion-mnist``) or in ``$TAPEFLOW_DATA_DIR``.
* ``mnist.load_data()``: MNIST from its IDX files in ``$TAPEFLOW_DATA_DIR`` (or a
  ``mnist.npz`` Keras already downloaded); no package ships it, so without the files
  it says how to get them and points to the two data sets above.

Each ``load_data()`` returns ``((x_train, y_train), (x_test, y_test))`` NumPy arrays
as Keras does: images uint8 in [0, 255] of shape (n, height, width), labels uint8.

>>> import tapeflow as tf
>>> (x_train, y_train), (x_test, y_test) = tf.datasets.digits.load_data()
>>> x_train.shape, x_train.dtype, y_test.shape, int(x_train.max())
((1437, 8, 8), dtype('uint8'), (360,), 255)
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import types
import zipfile
import zlib

import numpy as np

from .train import files as _files
from .errors import DataLossError, ResourceExhaustedError

__all__ = ["load_digits", "digits", "fashion_mnist", "mnist", "DatasetNotFoundError",
           "read_idx", "read_npz", "DATA_DIR_ENV"]

DATA_DIR_ENV = "TAPEFLOW_DATA_DIR"
DEBIAN_DATA_ROOT = "/usr/share/datasets"


class DatasetNotFoundError(FileNotFoundError):
    """A data set's files are not on this machine (the message says how to get them)."""


# --- IDX files --------------------------------------------------------------------------

_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
              0x0E: ">f8"}


#: the largest IDX payload read (Fashion-MNIST's training images are 47 MB)
MAX_IDX_BYTES = 4 << 30
#: the highest compression ratio a gzipped IDX file may claim (MNIST's images: ~5);
#: a gzip bomb inflates ~1000:1. Payloads up to _IDX_ANY_RATIO_BYTES are exempt.
MAX_IDX_RATIO = 100
_IDX_ANY_RATIO_BYTES = 64 << 20
_CHUNK = 16 << 20


def read_idx(path, max_bytes=MAX_IDX_BYTES, max_ratio=MAX_IDX_RATIO) -> np.ndarray:
    """The array in an IDX file (``.gz`` compressed or not), as in (Fashion-)MNIST.

    The header (magic number, dims) is read first and says how many bytes of data
    follow, and that size is checked against the file before anything is allocated:
    an uncompressed file must hold exactly that many bytes; a gzipped one may not
    claim a compression ratio above ``max_ratio`` (for payloads over 64 MiB: a
    "gzip bomb" is refused from its sizes alone), and is decompressed in chunks only
    as far as the declared size. Any payload is capped at ``max_bytes``, and a file
    with more or fewer bytes than declared is refused. Only regular files are opened
    (a FIFO or ``/dev/zero`` is refused). Errors are ``DataLossError`` naming the file.
    """
    f, file_size = _files.open_regular(path, "IDX file")
    gz = str(path).endswith(".gz")
    with f:
        stream = gzip.GzipFile(fileobj=f, mode="rb") if gz else f
        try:
            head = stream.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_TYPES:
                raise DataLossError(f"{path}: not an IDX file (bad magic number {head!r})")
            ndim = head[3]
            dims = stream.read(4 * ndim)
            if len(dims) < 4 * ndim:
                raise DataLossError(f"{path}: truncated IDX header ({ndim} dimensions declared)")
            shape = tuple(int.from_bytes(dims[4 * i:4 * i + 4], "big") for i in range(ndim))
            dtype = np.dtype(_IDX_TYPES[head[2]])
            nbytes = dtype.itemsize
            for d in shape:
                nbytes *= d
            declares = f"the IDX header declares shape {shape} ({nbytes} bytes of data)"
            if nbytes > max_bytes:
                raise DataLossError(
                    f"{path}: {declares}, more than the {max_bytes} tapeflow reads "
                    "(read_idx(max_bytes=...))")
            if not gz and file_size - 4 - 4 * ndim != nbytes:
                have = file_size - 4 - 4 * ndim
                raise DataLossError(
                    f"{path}: {declares} but the file has "
                    f"{'more' if have > nbytes else have} bytes of data")
            if gz and nbytes > max(_IDX_ANY_RATIO_BYTES, file_size * max_ratio):
                raise DataLossError(
                    f"{path}: {declares} but the gzip file has only {file_size} bytes: a "
                    f"compression ratio above {max_ratio} (a gzip bomb?); refusing to "
                    "decompress it (read_idx(max_ratio=...) if the file is genuine)")
            data = _read_exactly(stream, nbytes, path, declares)
        except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise DataLossError(f"{path}: corrupt or truncated IDX file ({e})") from None
    a = data.view(dtype).reshape(shape)
    return a if dtype.isnative else a.astype(dtype.newbyteorder("="))


def _read_exactly(stream, nbytes, path, declares):
    """``nbytes`` bytes of ``stream`` as a uint8 array, read in chunks (a compressed
    stream is inflated only that far); DataLossError when it holds fewer or more."""
    try:
        out = np.empty(nbytes, np.uint8)
    except MemoryError:
        raise ResourceExhaustedError(
            f"{path}: {declares}; not enough memory to hold them") from None
    view = memoryview(out)
    got = 0
    while got < nbytes:
        n = stream.readinto(view[got:got + _CHUNK])
        if not n:
            raise DataLossError(f"{path}: {declares} but the file has {got} bytes of data")
        got += n
    if stream.read(1):
        raise DataLossError(f"{path}: {declares} but the file has more bytes of data")
    return out


def read_npz(path, keys, max_bytes=MAX_IDX_BYTES, max_ratio=MAX_IDX_RATIO):
    """The arrays ``keys`` of the ``.npz`` file ``path`` (as ``np.load`` would give them),
    each checked before it is allocated: its ``.npy`` header's shape and dtype must
    account for exactly the bytes its zip entry declares, at most ``max_bytes``, and a
    compressed entry over 64 MiB may not claim a ratio above ``max_ratio``. No pickled
    objects. Errors are ``DataLossError`` naming the file and the array."""
    f, _ = _files.open_regular(path, "npz file")
    out = []
    with f:
        try:
            z = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise DataLossError(f"{path}: not a .npz (zip) file ({e})") from None
        with z:
            for key in keys:
                out.append(_npz_member(z, key, path, max_bytes, max_ratio))
    return out


def _npz_member(z, key, path, max_bytes, max_ratio):
    where = f"{path}: array {key!r}"
    try:
        info = z.getinfo(key + ".npy")
    except KeyError:
        raise DataLossError(f"{where} is missing (the file has "
                            f"{sorted(n[:-4] for n in z.namelist())[:10]})") from None
    if info.file_size > max_bytes + 4096:
        raise DataLossError(f"{where} declares {info.file_size} bytes, more than the "
                            f"{max_bytes} tapeflow reads")
    if (info.compress_type != zipfile.ZIP_STORED and info.file_size > max(
            _IDX_ANY_RATIO_BYTES, info.compress_size * max_ratio)):
        raise DataLossError(f"{where} inflates {info.compress_size} bytes to "
                            f"{info.file_size}: a compression ratio above {max_ratio} (a zip "
                            "bomb?); refusing to decompress it")
    try:
        with z.open(info) as m:
            version = np.lib.format.read_magic(m)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(m)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(m)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            if dtype.hasobject:
                raise ValueError("it holds Python objects (pickles), which tapeflow never loads")
            nbytes = dtype.itemsize
            for d in shape:
                nbytes *= d
            declares = f"array {key!r}'s header declares shape {shape} ({nbytes} bytes)"
            have = info.file_size - m.tell()
            if nbytes != have:
                raise DataLossError(f"{path}: {declares} but its zip entry holds {have} bytes")
            data = _read_exactly(m, nbytes, path, declares)
    except DataLossError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, SyntaxError) as e:
        raise DataLossError(f"{where} is corrupt ({e})") from None
    a = data.view(dtype)
    return a.reshape(shape[::-1]).T if fortran else a.reshape(shape)


_IDX_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
              "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _find_idx(directory):
    """The four IDX paths in ``directory`` (each plain or .gz), or None."""
    if not directory or not os.path.isdir(directory):
        return None
    paths = []
    for name in _IDX_NAMES:
        for candidate in (name + ".gz", name, name.replace("-idx", ".idx")):
            p = os.path.join(directory, candidate)
            if os.path.isfile(p):
                paths.append(p)
                break
        else:
            return None
    return paths


def _candidate_dirs(subdir, path):
    dirs = []
    if path is not None:
        dirs.append(os.fspath(path))
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        dirs += [os.path.join(env, subdir), env]
    dirs.append(os.path.join(DEBIAN_DATA_ROOT, subdir))
    return dirs


def _load_idx_set(subdir, path):
    dirs = _candidate_dirs(subdir, path)
    for d in dirs:
        paths = _find_idx(d)
        if paths is not None:
            x_train, y_train, x_test, y_test = (read_idx(p) for p in paths)
            return (x_train, y_train), (x_test, y_test)
    return dirs


def _files_hint(subdir):
    return (f"the four IDX files ({', '.join(n + '.gz' for n in _IDX_NAMES)}; plain or "
            f"gzipped) in a directory, then set {DATA_DIR_ENV}=that directory (or its parent, "
            f"with them in {DATA_DIR_ENV}/{subdir}/)")


# --- Fashion-MNIST ----------------------------------------------------------------------

def _fashion_mnist_load_data(path=None):
    """Fashion-MNIST: ((x_train (60000, 28, 28) uint8, y_train (60000,) uint8),
    (x_test (10000, 28, 28), y_test (10000,))); labels 0-9 are
    :data:`FASHION_MNIST_CLASSES`. Looks in ``path``, ``$TAPEFLOW_DATA_DIR/fashion-mnist``,
    ``$TAPEFLOW_DATA_DIR`` and ``/usr/share/datasets/fashion-mnist`` (Debian's
    ``dataset-fashion-mnist``); never downloads."""
    found = _load_idx_set("fashion-mnist", path)
    if isinstance(found, tuple):
        return found
    raise DatasetNotFoundError(
        "Fashion-MNIST is not on this machine (looked in: " + ", ".join(found) + "). "
        "tapeflow never downloads data. To get it, either\n"
        "  * install Debian/Ubuntu's package: sudo apt-get install dataset-fashion-mnist\n"
        f"    (it puts the files in {DEBIAN_DATA_ROOT}/fashion-mnist), or\n"
        "  * put " + _files_hint("fashion-mnist") + ".\n"
        "scikit-learn's digits need nothing: tf.datasets.load_digits().")


FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")


# --- MNIST ------------------------------------------------------------------------------

def _keras_mnist_npz():
    return os.path.join(os.path.expanduser("~"), ".keras", "datasets", "mnist.npz")


def _mnist_load_data(path=None):
    """MNIST in Keras' layout, from the IDX files in ``path``,
    ``$TAPEFLOW_DATA_DIR/mnist`` or ``$TAPEFLOW_DATA_DIR``, or an ``mnist.npz`` (``path``
    itself, or the one Keras keeps in ``~/.keras/datasets``). Never downloads: without
    the files the error says how to get them, or to use Fashion-MNIST or the digits."""
    npz_candidates = [os.fspath(path)] if path is not None and str(path).endswith(".npz") \
        else [_keras_mnist_npz()]
    for npz in npz_candidates:
        if os.path.isfile(npz):
            x_train, y_train, x_test, y_test = read_npz(
                npz, ("x_train", "y_train", "x_test", "y_test"))
            return (x_train, y_train), (x_test, y_test)
    found = _load_idx_set("mnist", None if path is not None and str(path).endswith(".npz")
                          else path)
    if isinstance(found, tuple):
        return found
    raise DatasetNotFoundError(
        "MNIST is not on this machine (looked in: " + ", ".join(found + npz_candidates)
        + "). tapeflow never downloads data and no package ships MNIST; either put "
        + _files_hint("mnist") + ", or use a data set a package installs:\n"
        "  * tf.datasets.fashion_mnist.load_data()  (same shapes and dtypes; "
        "sudo apt-get install dataset-fashion-mnist)\n"
        "  * tf.datasets.digits.load_data()  (8x8 digits shipped with scikit-learn)")


# --- scikit-learn's digits --------------------------------------------------------------

def _digits_csv():
    """Path of scikit-learn's digits.csv.gz, found without importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        p = os.path.join(root, "datasets", "data", "digits.csv.gz")
        if os.path.isfile(p):
            return p
    return None


def _digits_arrays():
    """(images (1797, 8, 8) with values 0..16, labels (1797,))."""
    path = _digits_csv()
    if path is not None:
        data = np.loadtxt(path, delimiter=",")
        return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    try:
        from sklearn.datasets import load_digits as sk_load_digits
    except ImportError:
        raise DatasetNotFoundError(
            "the digits data set comes with scikit-learn, which is not installed: "
            "pip install 'tapeflow[datasets]' (or pip install scikit-learn)") from None
    d = sk_load_digits()
    return d.images, d.target


def load_digits(test_size=360, seed=0):
    """scikit-learn's 8x8 handwritten digits as ((x_train, y_train), (x_test, y_test)):
    images uint8 in [0, 255] of shape (n, 8, 8) (the original 0..16 levels scaled),
    labels uint8 0-9. The split is fixed: a permutation drawn with ``seed`` puts
    ``test_size`` images (default 360, about 20%) in the test set and 1437 in the
    training set."""
    images, labels = _digits_arrays()
    images = np.round(images * (255.0 / 16.0)).astype(np.uint8)
    labels = labels.astype(np.uint8)
    order = np.random.default_rng(seed).permutation(len(images))
    test, train = order[:test_size], order[test_size:]
    return (images[train], labels[train]), (images[test], labels[test])


def _namespace(name, load_data, **extra):
    ns = types.SimpleNamespace(load_data=load_data, **extra)
    ns.__name__ = f"{__name__}.{name}"
    return ns


digits = _namespace("digits", lambda: load_digits())
digits.load_data.__doc__ = load_digits.__doc__
fashion_mnist = _namespace("fashion_mnist", _fashion_mnist_load_data,
                           CLASSES=FASHION_MNIST_CLASSES)
mnist = _namespace("mnist", _mnist_load_data)
