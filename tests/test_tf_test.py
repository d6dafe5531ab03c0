"""``tf.test`` (issue 45, the TF 1 eager scaffolding): the TestCase the seeds' example
programs' tests subclass, ``tf.test.main``, ``tf.test.Benchmark`` and the device
queries -- each assertion checked on what it must accept and on what it must refuse."""

import subprocess
import sys
import unittest

import numpy as np

import tapeflow as tf


class TestAssertions(tf.test.TestCase):
    """(pytest runs a unittest TestCase as it is)"""

    def test_close_structures(self):
        self.assertAllClose({"a": tf.constant([1.0, 2.0]), "b": (3.0, np.float32(4.0))},
                            {"a": [1.0, 2.0], "b": (3.0, 4.0)})
        self.assertAllClose([tf.constant([1.0]), tf.constant([2.0, 3.0])], [[1.0], [2.0, 3.0]])
        self.assertAllClose(tf.Variable([1.0, 2.0]), np.array([1.0, 2.0 + 1e-7]))

    def test_close_refuses(self):
        with self.assertRaises(AssertionError):
            self.assertAllClose([1.0], [1.1])
        with self.assertRaisesRegex(AssertionError, r"\['b'\]"):
            self.assertAllClose({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.5})
        with self.assertRaisesRegex(AssertionError, "structure"):
            self.assertAllClose({"a": 1.0}, {"b": 1.0})
        with self.assertRaises(AssertionError):
            self.assertAllClose(tf.ones([2, 2]), tf.ones([3]))
        self.assertNotAllClose([1.0], [1.1])
        with self.assertRaises(AssertionError):
            self.assertNotAllClose([1.0], [1.0])

    def test_equal(self):
        self.assertAllEqual(tf.constant([1, 2]), [1, 2])
        self.assertAllEqual((tf.constant([True]), "x"), ([True], "x"))
        with self.assertRaisesRegex(AssertionError, "shapes"):
            self.assertAllEqual([1, 2], [[1, 2]])
        with self.assertRaises(AssertionError):
            self.assertAllEqual(tf.constant([1, 2]), [1, 3])
        self.assertNotAllEqual([1, 2], [1, 3])

    def test_ranges_and_comparisons(self):
        x = tf.constant([0.0, 0.5, 1.0])
        self.assertAllInRange(x, 0.0, 1.0)
        with self.assertRaisesRegex(AssertionError, r"index \(2,\)"):
            self.assertAllInRange(x, 0.0, 1.0, open_upper_bound=True)
        with self.assertRaisesRegex(AssertionError, r"index \(0,\)"):
            self.assertAllInRange(x, 0.0, 1.0, open_lower_bound=True)
        self.assertAllGreater(x + 1.0, 0.5)
        self.assertAllLess(x, 2.0)
        with self.assertRaises(AssertionError):
            self.assertAllGreater(x, 0.0)
        self.assertShapeEqual(np.zeros((2, 3)), tf.zeros([2, 3]))
        self.assertDTypeEqual(tf.constant([1.0]), tf.float32)

    def test_evaluate_and_sessions(self):
        out = self.evaluate({"x": tf.constant([1.0]), "y": (tf.constant(2), 3)})
        assert isinstance(out["x"], np.ndarray) and out["y"][0] == 2 and out["y"][1] == 3
        with self.cached_session() as s, self.session():
            assert s is None


def test_a_failing_assertion_fails_the_test():
    class T(tf.test.TestCase):
        def test_wrong(self):
            self.assertAllClose(tf.constant([1.0, 2.0]), [1.0, 2.5])

    res = unittest.TestResult()
    T("test_wrong").run(res)
    assert len(res.failures) == 1 and "at value" in res.failures[0][1]


def test_tf_test_is_the_testing_module():
    import tapeflow.testing as testing
    assert tf.test is testing and tf.test.TestCase is testing.TestCase
    assert tf.test.is_gpu_available() == (tf.num_gpus() > 0)
    assert tf.test.gpu_device_name() == ("" if tf.num_gpus() == 0 else "gpu:0") or \
        tf.test.gpu_device_name().startswith(("cuda", "opencl"))
    assert isinstance(tf.test.is_built_with_cuda(), bool)


def test_benchmark_reports(capsys):
    class B(tf.test.Benchmark):
        def benchmark_add(self):
            x = tf.ones([8])
            wall = self.time(lambda: x + x, iters=5)
            return self.report_benchmark(iters=5, wall_time=wall, extras={"n": 8})

    b = B()
    entry = b.benchmark_add()
    assert entry["name"] == "B" and entry["iters"] == 5 and entry["wall_time"] > 0
    assert b.reports == [entry] and '"extras": {"n": 8}' in capsys.readouterr().out


def test_main_runs_the_module_and_exits_with_its_status(tmp_path):
    src = ("import tapeflow as tf\n"
           "class T(tf.test.TestCase):\n"
           "    def test_ok(self):\n"
           "        self.assertAllClose(tf.square(2.0), 4.0)\n"
           "    def test_{}(self):\n"
           "        self.assertAllEqual(tf.constant([1]), [{}])\n"
           "if __name__ == '__main__':\n"
           "    tf.test.main()\n")
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(src.format("ok2", 1))
    bad.write_text(src.format("bad", 2))
    r = subprocess.run([sys.executable, str(good)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "Ran 2 tests" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, str(bad)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "FAILED (failures=1)" in r.stderr, r.stderr
