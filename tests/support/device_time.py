"""A Keras layer that stands for a device of a chosen speed: it sleeps in the forward pass in proportion to the batch.

Shared, as cell source, by tests/runtime/test_balance.py and bench/balance.py: the ranks of one job get different speeds
(as mixed GPUs would have) without competing for this machine's two cores, since sleeping takes no CPU.
"""

DEVICE_TIME_LAYER = """
import time
import numpy as np
import keras
import tensorflow as tf

class DeviceTime(keras.layers.Layer):
    '''Sleeps `seconds_per_sample` per sample of each batch in the forward pass.'''
    def __init__(self, seconds_per_sample, **kwargs):
        super().__init__(**kwargs)
        self.seconds_per_sample = seconds_per_sample
    def call(self, x):
        def wait(n):
            time.sleep(float(n) * self.seconds_per_sample)
            return np.float32(0.0)
        waited = tf.py_function(wait, [tf.shape(x)[0]], tf.float32)
        waited.set_shape([])
        return x + waited
    def compute_output_shape(self, input_shape):
        return input_shape
"""
