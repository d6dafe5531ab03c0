"""Training: one optimizer step (forward, backward, update) of the MLP (SGD, batch 64)
and of the seeds' CNN (Adam, batch 16); saving and restoring a tf.train.Checkpoint of
the CNN with its optimizer's slots."""

import os
import shutil
import tempfile

import tapeflow as tf

from .common import CNN, DEVICES, MLP, device, sync, warm


class TrainStep:
    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        self.mlp = MLP(dev, 64)
        self.cnn = CNN(dev, 16)
        warm(dev, self.mlp.sgd_step)
        warm(dev, self.cnn.adam_step)

    def time_mlp_sgd_step(self, name):
        self.mlp.sgd_step()
        sync(self.dev)

    def time_cnn_adam_step(self, name):
        self.cnn.adam_step()
        sync(self.dev)


class Checkpoint:
    """``Checkpoint(model=..., optimizer=...)``: ``write`` to a fixed prefix (no
    counter, so every call writes the same files) and ``restore`` from it."""

    params = [DEVICES]
    param_names = ["device"]

    def setup(self, name):
        self.dev = dev = device(name)
        self.cnn = CNN(dev, 4)
        self.cnn.adam_step()                       # Adam's slots exist: they are saved too
        self.ckpt = tf.train.Checkpoint(model=self.cnn.model, optimizer=self.cnn.opt)
        self.dir = tempfile.mkdtemp(prefix="tapeflow-asv-")
        self.prefix = os.path.join(self.dir, "ckpt")
        warm(dev, lambda: self.ckpt.write(self.prefix))
        warm(dev, lambda: self.ckpt.restore(self.prefix))

    def teardown(self, name):
        # asv calls teardown after a skipped setup too (no self.dir then)
        if getattr(self, "dir", None):
            shutil.rmtree(self.dir, ignore_errors=True)

    def time_save(self, name):
        self.ckpt.write(self.prefix)
        sync(self.dev)

    def time_restore(self, name):
        self.ckpt.restore(self.prefix)
        sync(self.dev)
