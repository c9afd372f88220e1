"""keras.io examples, fourth pass: copied as keras.io writes them, set up in plain cells, `%%distribute -n 2` on fit.

"Point cloud classification with PointNet" (an `OrthogonalRegularizer(num_features, l2reg=0.001)` without get_config,
used as an activity regularizer inside `tnet` / `conv_bn` / `dense_bn` helper functions), "Image similarity with a
Siamese network and contrastive loss" (a `loss(margin=1)` closure, a shared `embedding_network` behind a
`Lambda(euclidean_distance)`), "Data-efficient GANs with Adaptive Discriminator Augmentation" (reduced: an
`AdaptiveAugmenter` whose `probability` Variable follows the discriminator's accuracy on real images, a GAN with its
own compile, two optimizers, a GradientTape train_step and an EMA generator), "Gradient Centralization" (an RMSprop
subclass that centralizes the gradients, in Keras 3's `apply`) and "Timeseries anomaly detection using an
Autoencoder" (Conv1D / Conv1DTranspose, validation_split and EarlyStopping, then the MAE threshold). Each runs in one
process and on two ranks; the later plain cells must work after both, with comparable results. Data is synthetic,
in the examples' shapes.
"""

import os

import numpy as np
from notebook_cells import cell as _cell
from notebook_cells import close


def _in_folder(monkeypatch, folder):
    os.makedirs(folder, exist_ok=True)
    monkeypatch.chdir(folder)


# --------------------------------------------------------------------------------------------------------- PointNet

POINTNET = """
import numpy as np
import tensorflow as tf
from tensorflow import data as tf_data
import keras
from keras import layers
from keras import ops

keras.utils.set_random_seed(1234)

NUM_POINTS = 64
NUM_CLASSES = 3
BATCH_SIZE = 32

# ModelNet10's shapes, three of them sampled as point clouds: sphere, cube and cylinder surfaces.
rng = np.random.default_rng(0)


def sample(kind, n):
    if kind == 0:
        p = rng.normal(size=(n, 3))
        return p / np.linalg.norm(p, axis=1, keepdims=True)
    if kind == 1:
        p = rng.uniform(-1, 1, (n, 3))
        face = rng.integers(0, 3, n)
        p[np.arange(n), face] = np.sign(rng.uniform(-1, 1, n))
        return p
    angle = rng.uniform(0, 2 * np.pi, n)
    return np.stack([np.cos(angle), np.sin(angle), rng.uniform(-1, 1, n)], axis=1)


def parse_dataset(num_points, per_class):
    points, labels = [], []
    for kind in range(NUM_CLASSES):
        for _ in range(per_class):
            points.append(sample(kind, num_points) * rng.uniform(0.5, 1.5))
            labels.append(kind)
    return np.array(points), np.array(labels)


train_points, train_labels = parse_dataset(NUM_POINTS, 43)
train_points, train_labels = train_points[:128], train_labels[:128]
order = rng.permutation(128)
train_points, train_labels = train_points[order], train_labels[order]
test_points, test_labels = parse_dataset(NUM_POINTS, 16)


def augment(points, label):
    # jitter points
    points += keras.random.uniform(points.shape, -0.005, 0.005, dtype="float64")
    # shuffle points
    points = keras.random.shuffle(points)
    return points, label


train_dataset = tf_data.Dataset.from_tensor_slices((train_points, train_labels))
test_dataset = tf_data.Dataset.from_tensor_slices((test_points, test_labels))

train_dataset = train_dataset.shuffle(len(train_points)).map(augment).batch(BATCH_SIZE)
test_dataset = test_dataset.shuffle(len(test_points)).batch(BATCH_SIZE)


def conv_bn(x, filters):
    x = layers.Conv1D(filters, kernel_size=1, padding="valid")(x)
    x = layers.BatchNormalization(momentum=0.0)(x)
    return layers.Activation("relu")(x)


def dense_bn(x, filters):
    x = layers.Dense(filters)(x)
    x = layers.BatchNormalization(momentum=0.0)(x)
    return layers.Activation("relu")(x)


class OrthogonalRegularizer(keras.regularizers.Regularizer):
    def __init__(self, num_features, l2reg=0.001):
        self.num_features = num_features
        self.l2reg = l2reg
        self.eye = ops.eye(num_features)

    def __call__(self, x):
        x = ops.reshape(x, (-1, self.num_features, self.num_features))
        xxt = ops.tensordot(x, x, axes=(2, 2))
        xxt = ops.reshape(xxt, (-1, self.num_features, self.num_features))
        return ops.sum(self.l2reg * ops.square(xxt - self.eye))


def tnet(inputs, num_features):
    # Initialise bias as the identity matrix
    bias = keras.initializers.Constant(np.eye(num_features).flatten())
    reg = OrthogonalRegularizer(num_features)

    x = conv_bn(inputs, 16)
    x = conv_bn(x, 32)
    x = conv_bn(x, 64)
    x = layers.GlobalMaxPooling1D()(x)
    x = dense_bn(x, 32)
    x = dense_bn(x, 16)
    x = layers.Dense(
        num_features * num_features,
        kernel_initializer="zeros",
        bias_initializer=bias,
        activity_regularizer=reg,
    )(x)
    feat_T = layers.Reshape((num_features, num_features))(x)
    # Apply affine transformation to input features
    return layers.Dot(axes=(2, 1))([inputs, feat_T])


inputs = keras.Input(shape=(NUM_POINTS, 3))

x = tnet(inputs, 3)
x = conv_bn(x, 16)
x = conv_bn(x, 16)
x = tnet(x, 16)
x = conv_bn(x, 16)
x = conv_bn(x, 32)
x = conv_bn(x, 64)
x = layers.GlobalMaxPooling1D()(x)
x = dense_bn(x, 32)
x = layers.Dropout(0.3)(x)
x = dense_bn(x, 16)
x = layers.Dropout(0.3)(x)

outputs = layers.Dense(NUM_CLASSES, activation="softmax")(x)

model = keras.Model(inputs=inputs, outputs=outputs, name="pointnet")

model.compile(
    loss="sparse_categorical_crossentropy",
    optimizer=keras.optimizers.Adam(learning_rate=0.001),
    metrics=["sparse_categorical_accuracy"],
)
"""

POINTNET_FIT = """history = model.fit(train_dataset, epochs=8, validation_data=test_dataset, verbose=0)
"""

POINTNET_CHECK = """
data = test_dataset.take(1)

points, labels = list(data)[0]
points = points[:8, ...]
labels = labels[:8, ...]

# run test data through model
preds = model.predict(points, verbose=0)
preds = ops.argmax(preds, -1)
test_loss, test_acc = model.evaluate(test_dataset, verbose=0)
"""


def test_pointnet_orthogonal_regularizer(shell):
    """PointNet, reduced: two T-nets whose last Dense has an `OrthogonalRegularizer` (no get_config) as its activity
    regularizer; the notebook's model, its layers and their regularizers come back trained, and predict works."""
    _cell(shell, POINTNET)
    _cell(shell, POINTNET_FIT)
    one = _cell(shell, POINTNET_CHECK)
    one = {"loss": one["history"].history["loss"][-1], "acc": one["test_acc"]}
    ns = _cell(shell, POINTNET)
    model = ns["model"]
    regularized = [layer for layer in model.layers if layer.activity_regularizer is not None]
    regularizers = [layer.activity_regularizer for layer in regularized]
    assert len(regularized) == 2 and all(type(r).__name__ == "OrthogonalRegularizer" for r in regularizers)
    weights = [w.numpy().copy() for w in model.trainable_weights]
    ns = _cell(shell, POINTNET_FIT, distribute=True)
    assert ns["model"] is model and [layer.activity_regularizer for layer in regularized] == regularizers
    assert all(a is b for a, b in zip([layer.activity_regularizer for layer in regularized], regularizers))
    assert model.optimizer.iterations.numpy() == 8 * 2  # 128 clouds in batches of 32: 2 a rank
    moved = [not np.allclose(w.numpy(), u) for w, u in zip(model.trainable_weights, weights)]
    assert all(moved), moved
    ns = _cell(shell, POINTNET_CHECK)
    assert np.array(ns["preds"]).shape == (8,)
    close(ns["history"].history["loss"][-1], one["loss"], 1.6, "PointNet training loss")
    # Half the steps a rank, and BatchNormalization(momentum=0.0) keeps the last batch's statistics only: the test
    # accuracy is noisier than one process's (3 classes: chance is 0.33).
    assert ns["test_acc"] > one["acc"] - 0.3 and ns["test_acc"] > 0.5, (ns["test_acc"], one["acc"])


# ------------------------------------------------------------------------------------------- Siamese, contrastive

SIAMESE = """
import random
import numpy as np
import keras
from keras import ops
from sklearn.datasets import load_digits

random.seed(0)
keras.utils.set_random_seed(0)

epochs = 4
batch_size = 16
margin = 1  # Margin for contrastive loss.

# MNIST's shapes: 28x28 grey digits (here sklearn's 8x8 digits grown to 24x24 and padded).
digits = load_digits()
images = np.pad(np.kron(digits.images, np.ones((3, 3))), ((0, 0), (2, 2), (2, 2))) * 16
x_train_val, y_train_val = images[:600].astype("float32"), digits.target[:600]
x_test, y_test = images[1500:1700].astype("float32"), digits.target[1500:1700]

# Change the data type to a floating point format
x_train_val = x_train_val.astype("float32")
x_test = x_test.astype("float32")

# Keep 50% of train_val  in validation set
x_train, x_val = x_train_val[:300], x_train_val[300:]
y_train, y_val = y_train_val[:300], y_train_val[300:]
del x_train_val, y_train_val


def make_pairs(x, y):
    num_classes = max(y) + 1
    digit_indices = [np.where(y == i)[0] for i in range(num_classes)]

    pairs = []
    labels = []

    for idx1 in range(len(x)):
        # add a matching example
        x1 = x[idx1]
        label1 = y[idx1]
        idx2 = random.choice(digit_indices[label1])
        x2 = x[idx2]

        pairs += [[x1, x2]]
        labels += [0]

        # add a non-matching example
        label2 = random.randint(0, num_classes - 1)
        while label2 == label1:
            label2 = random.randint(0, num_classes - 1)

        idx2 = random.choice(digit_indices[label2])
        x2 = x[idx2]

        pairs += [[x1, x2]]
        labels += [1]

    return np.array(pairs), np.array(labels).astype("float32")


# make train pairs
pairs_train, labels_train = make_pairs(x_train, y_train)

# make validation pairs
pairs_val, labels_val = make_pairs(x_val, y_val)

# make test pairs
pairs_test, labels_test = make_pairs(x_test, y_test)

x_train_1 = pairs_train[:, 0]  # x_train_1.shape is (600, 28, 28)
x_train_2 = pairs_train[:, 1]
x_val_1 = pairs_val[:, 0]
x_val_2 = pairs_val[:, 1]
x_test_1 = pairs_test[:, 0]
x_test_2 = pairs_test[:, 1]


# Provided two tensors t1 and t2
# Euclidean distance = sqrt(sum(square(t1-t2)))
def euclidean_distance(vects):
    x, y = vects
    sum_square = ops.sum(ops.square(x - y), axis=1, keepdims=True)
    return ops.sqrt(ops.maximum(sum_square, keras.backend.epsilon()))


input = keras.layers.Input((28, 28, 1))
x = keras.layers.BatchNormalization()(input)
x = keras.layers.Conv2D(4, (5, 5), activation="tanh")(x)
x = keras.layers.AveragePooling2D(pool_size=(2, 2))(x)
x = keras.layers.Conv2D(16, (5, 5), activation="tanh")(x)
x = keras.layers.AveragePooling2D(pool_size=(2, 2))(x)
x = keras.layers.Flatten()(x)

x = keras.layers.BatchNormalization()(x)
x = keras.layers.Dense(10, activation="tanh")(x)
embedding_network = keras.Model(input, x)


input_1 = keras.layers.Input((28, 28, 1))
input_2 = keras.layers.Input((28, 28, 1))

# As mentioned above, Siamese Network share weights between
# tower networks (sister networks). To allow this, we will use
# same embedding network for both tower networks.
tower_1 = embedding_network(input_1)
tower_2 = embedding_network(input_2)

merge_layer = keras.layers.Lambda(euclidean_distance, output_shape=(1,))([tower_1, tower_2])
normal_layer = keras.layers.BatchNormalization()(merge_layer)
output_layer = keras.layers.Dense(1, activation="sigmoid")(normal_layer)
siamese = keras.Model(inputs=[input_1, input_2], outputs=output_layer)


def loss(margin=1):
    # Contrastive loss = mean( (1-true_value) * square(prediction) +
    #                         true_value * square( max(margin-prediction, 0) ))
    def contrastive_loss(y_true, y_pred):
        square_pred = ops.square(y_pred)
        margin_square = ops.square(ops.maximum(margin - (y_pred), 0))
        return ops.mean((1 - y_true) * square_pred + (y_true) * margin_square)

    return contrastive_loss


siamese.compile(loss=loss(margin=margin), optimizer="RMSprop", metrics=["accuracy"])
"""

SIAMESE_FIT = """history = siamese.fit(
    [x_train_1, x_train_2],
    labels_train,
    validation_data=([x_val_1, x_val_2], labels_val),
    batch_size=batch_size,
    epochs=epochs,
    verbose=0,
)
"""

SIAMESE_CHECK = """
results = siamese.evaluate([x_test_1, x_test_2], labels_test, verbose=0)
print("test loss, test acc:", results)
predictions = siamese.predict([x_test_1, x_test_2], verbose=0)
same = float(np.mean(predictions[labels_test == 0]))
different = float(np.mean(predictions[labels_test == 1]))
"""


def test_siamese_contrastive_loss(shell):
    """Siamese network: a shared `embedding_network` in two towers, a `Lambda(euclidean_distance)`, compiled with the
    `loss(margin)` closure and "RMSprop" in a plain cell; the notebook's siamese, its tower and its loss come back,
    trained, and tell matching pairs from non-matching ones."""
    _cell(shell, SIAMESE)
    _cell(shell, SIAMESE_FIT)
    one = _cell(shell, SIAMESE_CHECK)
    one = {"loss": one["results"][0], "acc": one["results"][1], "val": one["history"].history["val_loss"][-1]}
    ns = _cell(shell, SIAMESE)
    siamese, embedding, contrastive = ns["siamese"], ns["embedding_network"], ns["siamese"].loss
    lambda_layer = next(layer for layer in siamese.layers if isinstance(layer, ns["keras"].layers.Lambda))
    embedding_weights = [w.numpy().copy() for w in embedding.trainable_weights]
    ns = _cell(shell, SIAMESE_FIT, distribute=True)
    assert ns["siamese"] is siamese and ns["embedding_network"] is embedding and embedding in siamese.layers
    assert siamese.loss is contrastive and contrastive.__name__ == "contrastive_loss"
    assert lambda_layer in siamese.layers and lambda_layer.function is ns["euclidean_distance"]
    assert siamese.optimizer.iterations.numpy() == 4 * 19  # 600 pairs in batches of 16: 38 batches, 19 a rank
    assert type(siamese.optimizer).__name__ == "RMSprop"
    assert all(not np.allclose(w.numpy(), u) for w, u in zip(embedding.trainable_weights, embedding_weights))
    ns = _cell(shell, SIAMESE_CHECK)
    close(ns["history"].history["val_loss"][-1], one["val"], 1.5, "siamese val_loss")
    close(ns["results"][0], one["loss"], 1.5, "siamese test loss")
    # 19 steps an epoch a rank where one process takes 38: a few points of accuracy behind it.
    assert ns["results"][1] > 0.7 and ns["results"][1] > one["acc"] - 0.15, (ns["results"], one["acc"])
    # The sigmoid sits near 0.5 after 4 short epochs (accuracy thresholds it there): higher for different digits.
    assert ns["different"] > ns["same"], (ns["same"], ns["different"])


# ------------------------------------------------------------------------------ data-efficient GAN, adaptive aug

GAN = """
import numpy as np
import tensorflow as tf
import keras
from keras import ops
from keras import layers

keras.utils.set_random_seed(0)

# data
num_epochs = 4
image_size = 16

# resolution of Kernel Inception Distance measurement, see related section
padding = 0.25

# adaptive discriminator augmentation
max_translation = 0.125
max_rotation = 0.125
max_zoom = 0.25
target_accuracy = 0.6  # 0.85 and 1000 in the example, whose training is 400 times longer
integration_steps = 5

# architecture
noise_size = 16
depth = 2
width = 16
leaky_relu_slope = 0.2
dropout_rate = 0.4

# optimization
batch_size = 16
learning_rate = 2e-4
beta_1 = 0.5  # not using the default value of 0.9 is important
ema = 0.9

# Caltech birds' shapes: small colour "photographs", bright blobs on a darker background.
rng = np.random.default_rng(0)
yy, xx = np.mgrid[0:24, 0:24] / 23.0
birds = []
for _ in range(128):
    cy, cx = rng.uniform(0.3, 0.7, 2)
    blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 0.03)[..., None] * rng.uniform(0.5, 1, (1, 1, 3))
    birds.append((255 * np.clip(0.1 + blob + rng.uniform(0, 0.05, (24, 24, 3)), 0, 1)).astype("uint8"))
birds = np.stack(birds)


def round_to_int(float_value):
    return ops.cast(ops.round(float_value), "int32")


def preprocess_image(image):
    # unnormalize bounding box coordinates
    height = ops.cast(ops.shape(image)[0], "float32")
    width = ops.cast(ops.shape(image)[1], "float32")

    # calculate center and length of longer side, add padding
    target_center_y = 0.5 * height
    target_center_x = 0.5 * width
    target_size = ops.maximum(height, width) * (1.0 + padding) * 0.8

    # modify crop size to fit into image
    target_height = ops.min([target_size, 2.0 * target_center_y, 2.0 * (height - target_center_y)])
    target_width = ops.min([target_size, 2.0 * target_center_x, 2.0 * (width - target_center_x)])

    # crop image, note that the images are not resized to the target size here
    image = ops.slice(
        image,
        start_indices=(
            round_to_int(target_center_y - 0.5 * target_height),
            round_to_int(target_center_x - 0.5 * target_width),
            0,
        ),
        shape=(round_to_int(target_height), round_to_int(target_width), 3),
    )

    # resize and clip
    image = ops.cast(image, "float32")
    image = ops.image.resize(image, [image_size, image_size])

    return ops.clip(image / 255.0, 0.0, 1.0)


def prepare_dataset():
    # the validation dataset is shuffled as well, because data order matters
    # for the KID calculation
    return (
        tf.data.Dataset.from_tensor_slices(birds)
        .map(preprocess_image, num_parallel_calls=tf.data.AUTOTUNE)
        .cache()
        .shuffle(10 * batch_size)
        .batch(batch_size, drop_remainder=True)
        .prefetch(buffer_size=tf.data.AUTOTUNE)
    )


train_dataset = prepare_dataset()


# "hard sigmoid", useful for binary accuracy calculation from logits
def step(values):
    # negative values -> 0.0, positive values -> 1.0
    return 0.5 * (1.0 + ops.sign(values))


# augments images with a probability that is dynamically updated during training
class AdaptiveAugmenter(keras.Model):
    def __init__(self):
        super().__init__()

        # stores the current probability of an image being augmented
        self.probability = keras.Variable(0.0)
        self.seed_generator = keras.random.SeedGenerator(42)

        # the corresponding augmentation names from the paper are shown above each layer
        # the authors show (see figure 4), that the blitting and geometric augmentations
        # are the most helpful in the low-data regime
        self.augmenter = keras.Sequential(
            [
                layers.InputLayer(shape=(image_size, image_size, 3)),
                # blitting/x-flip:
                layers.RandomFlip("horizontal"),
                # blitting/integer translation:
                layers.RandomTranslation(
                    height_factor=max_translation,
                    width_factor=max_translation,
                    interpolation="nearest",
                ),
                # geometric/rotation:
                layers.RandomRotation(factor=max_rotation),
                # geometric/isotropic and anisotropic scaling:
                layers.RandomZoom(height_factor=(-max_zoom, 0.0), width_factor=(-max_zoom, 0.0)),
            ],
            name="adaptive_augmenter",
        )

    def call(self, images, training):
        if training:
            augmented_images = self.augmenter(images, training=training)

            # during training either the original or the augmented images are selected
            # based on self.probability
            augmentation_values = keras.random.uniform(shape=(batch_size, 1, 1, 1), seed=self.seed_generator)
            augmentation_bools = ops.less(augmentation_values, self.probability)

            images = ops.where(augmentation_bools, augmented_images, images)
        return images

    def update(self, real_logits):
        current_accuracy = ops.mean(step(real_logits))

        # the augmentation probability is updated based on the discriminator's
        # accuracy on real images
        accuracy_error = current_accuracy - target_accuracy
        self.probability.assign(ops.clip(self.probability + accuracy_error / integration_steps, 0.0, 1.0))


# DCGAN generator
def get_generator():
    noise_input = keras.Input(shape=(noise_size,))
    x = layers.Dense(4 * 4 * width, use_bias=False)(noise_input)
    x = layers.BatchNormalization(scale=False)(x)
    x = layers.ReLU()(x)
    x = layers.Reshape(target_shape=(4, 4, width))(x)
    for _ in range(depth - 1):
        x = layers.Conv2DTranspose(width, kernel_size=4, strides=2, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization(scale=False)(x)
        x = layers.ReLU()(x)
    image_output = layers.Conv2DTranspose(3, kernel_size=4, strides=2, padding="same", activation="sigmoid")(x)

    return keras.Model(noise_input, image_output, name="generator")


# DCGAN discriminator
def get_discriminator():
    image_input = keras.Input(shape=(image_size, image_size, 3))
    x = image_input
    for _ in range(depth):
        x = layers.Conv2D(width, kernel_size=4, strides=2, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization(scale=False)(x)
        x = layers.LeakyReLU(negative_slope=leaky_relu_slope)(x)
    x = layers.Flatten()(x)
    x = layers.Dropout(dropout_rate)(x)
    output_score = layers.Dense(1)(x)

    return keras.Model(image_input, output_score, name="discriminator")


class GAN_ADA(keras.Model):
    def __init__(self):
        super().__init__()

        self.seed_generator = keras.random.SeedGenerator(seed=42)
        self.augmenter = AdaptiveAugmenter()
        self.generator = get_generator()
        self.ema_generator = keras.models.clone_model(self.generator)
        self.discriminator = get_discriminator()

        # we have created all layers at this point, so we can mark the model
        # as having been built
        self.built = True

    def compile(self, generator_optimizer, discriminator_optimizer, **kwargs):
        super().compile(**kwargs)

        # separate optimizers for the two networks
        self.generator_optimizer = generator_optimizer
        self.discriminator_optimizer = discriminator_optimizer

        self.generator_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.discriminator_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.real_accuracy = keras.metrics.BinaryAccuracy(name="real_acc")
        self.generated_accuracy = keras.metrics.BinaryAccuracy(name="gen_acc")
        self.augmentation_probability_tracker = keras.metrics.Mean(name="aug_p")

    @property
    def metrics(self):
        return [
            self.generator_loss_tracker,
            self.discriminator_loss_tracker,
            self.real_accuracy,
            self.generated_accuracy,
            self.augmentation_probability_tracker,
        ]

    def generate(self, batch_size, training):
        latent_samples = keras.random.normal(shape=(batch_size, noise_size), seed=self.seed_generator)
        # use ema_generator during inference
        if training:
            generated_images = self.generator(latent_samples, training=training)
        else:
            generated_images = self.ema_generator(latent_samples, training=training)
        return generated_images

    def adversarial_loss(self, real_logits, generated_logits):
        # this is usually called the non-saturating GAN loss

        real_labels = ops.ones(shape=(batch_size, 1))
        generated_labels = ops.zeros(shape=(batch_size, 1))

        # the generator tries to produce images that the discriminator considers as real
        generator_loss = keras.losses.binary_crossentropy(real_labels, generated_logits, from_logits=True)
        # the discriminator tries to determine if images are real or generated
        discriminator_loss = keras.losses.binary_crossentropy(
            ops.concatenate([real_labels, generated_labels], axis=0),
            ops.concatenate([real_logits, generated_logits], axis=0),
            from_logits=True,
        )

        return ops.mean(generator_loss), ops.mean(discriminator_loss)

    def train_step(self, real_images):
        real_images = self.augmenter(real_images, training=True)

        # use persistent gradient tape because gradients will be calculated twice
        with tf.GradientTape(persistent=True) as tape:
            generated_images = self.generate(batch_size, training=True)
            # gradient is calculated through the image augmentation
            generated_images = self.augmenter(generated_images, training=True)

            # separate forward passes for the real and generated images, meaning
            # that batch normalization is applied separately
            real_logits = self.discriminator(real_images, training=True)
            generated_logits = self.discriminator(generated_images, training=True)

            generator_loss, discriminator_loss = self.adversarial_loss(real_logits, generated_logits)

        # calculate gradients and update weights
        generator_gradients = tape.gradient(generator_loss, self.generator.trainable_weights)
        discriminator_gradients = tape.gradient(discriminator_loss, self.discriminator.trainable_weights)
        self.generator_optimizer.apply_gradients(zip(generator_gradients, self.generator.trainable_weights))
        self.discriminator_optimizer.apply_gradients(
            zip(discriminator_gradients, self.discriminator.trainable_weights)
        )

        # update the augmentation probability based on the discriminator's performance
        self.augmenter.update(real_logits)

        self.generator_loss_tracker.update_state(generator_loss)
        self.discriminator_loss_tracker.update_state(discriminator_loss)
        self.real_accuracy.update_state(1.0, step(real_logits))
        self.generated_accuracy.update_state(0.0, step(generated_logits))
        self.augmentation_probability_tracker.update_state(self.augmenter.probability)

        # track the exponential moving average of the generator's weights to decrease
        # variance in the generation quality
        for weight, ema_weight in zip(self.generator.weights, self.ema_generator.weights):
            ema_weight.assign(ema * ema_weight + (1 - ema) * weight)

        return {m.name: m.result() for m in self.metrics}


# create and compile the model
model = GAN_ADA()
model.compile(
    generator_optimizer=keras.optimizers.Adam(learning_rate=learning_rate, beta_1=beta_1),
    discriminator_optimizer=keras.optimizers.Adam(learning_rate=learning_rate, beta_1=beta_1),
)
untrained_ema = [w.numpy().copy() for w in model.ema_generator.weights]
"""

GAN_FIT = """history = model.fit(train_dataset, epochs=num_epochs, verbose=0)
"""

GAN_CHECK = """
ema_weights = zip(model.ema_generator.weights, untrained_ema)
ema_moved = float(np.sqrt(sum(np.sum((w.numpy() - u) ** 2) for w, u in ema_weights)))
probability = float(model.augmenter.probability.numpy())
generated_images = model.generate(9, training=False)
"""


def test_data_efficient_gan_adaptive_augmentation(shell):
    """Data-efficient GAN with ADA, reduced (no KID): the augmenter's `probability` Variable moves in train_step from
    the discriminator's logits on each rank's real images, two optimizers of the model's own compile apply the
    generator's and the discriminator's gradients, and an EMA generator follows; the notebook's model comes back with
    the same sub-models and variables, trained, and generates."""
    _cell(shell, GAN)
    _cell(shell, GAN_FIT)
    one = _cell(shell, GAN_CHECK)
    one = {k: one[k] for k in ("ema_moved", "probability")} | {"history": one["history"].history}
    ns = _cell(shell, GAN)
    model = ns["model"]
    parts = {name: getattr(model, name) for name in ("augmenter", "generator", "ema_generator", "discriminator")}
    optimizers = model.generator_optimizer, model.discriminator_optimizer
    probability = model.augmenter.probability
    ns = _cell(shell, GAN_FIT, distribute=True)
    assert ns["model"] is model and all(getattr(model, name) is part for name, part in parts.items())
    assert (model.generator_optimizer, model.discriminator_optimizer) == optimizers
    assert model.augmenter.probability is probability
    # 128 images in batches of 16: 8 batches an epoch, 4 a rank.
    assert [int(o.iterations.numpy()) for o in optimizers] == [4 * 4, 4 * 4]
    history = ns["history"].history
    assert sorted(history) == ["aug_p", "d_loss", "g_loss", "gen_acc", "real_acc"]
    ns = _cell(shell, GAN_CHECK)
    # The probability climbs while the discriminator is right on more than target_accuracy of the real images. One
    # process moves it once a batch (0.88 after 32); each rank moves it from its own real images, 16 times, and the
    # ranks' values are averaged at each epoch's end (not: "the ranks trained apart"), as a step over the global
    # batch would move it (0.58). The notebook's variable holds that value, at or above the last epoch's mean.
    assert 0.2 < ns["probability"] <= 1.0 and 0.2 < one["probability"] <= 1.0, (ns["probability"], one["probability"])
    close(ns["probability"], one["probability"], 2, "augmentation probability")
    assert ns["probability"] >= history["aug_p"][-1] > history["aug_p"][0], (ns["probability"], history["aug_p"])
    close(history["d_loss"][-1], one["history"]["d_loss"][-1], 1.5, "discriminator loss")
    close(ns["ema_moved"], one["ema_moved"], 3, "how far the EMA generator moved")
    images = np.array(ns["generated_images"])
    assert images.shape == (9, 16, 16, 3) and np.isfinite(images).all() and 0 <= images.min() <= images.max() <= 1


# ----------------------------------------------------------------------------------------- gradient centralization

CENTRALIZATION = """
from time import time

import numpy as np
import tensorflow as tf
import keras
from keras import layers
from keras import ops
from keras.optimizers import RMSprop

keras.utils.set_random_seed(0)

image_size = 32
batch_size = 32
AUTOTUNE = tf.data.AUTOTUNE

# horses_or_humans' shapes: colour images of two classes (horses warm and bright, humans cool and dark).
rng = np.random.default_rng(0)
images = rng.integers(0, 150, (256, 40, 40, 3)).astype("uint8")
labels = np.arange(256) % 2
images[labels == 0, ..., 0] += 100
images[labels == 1, ..., 2] += 100
train_ds = tf.data.Dataset.from_tensor_slices((images[:192], labels[:192]))
test_ds = tf.data.Dataset.from_tensor_slices((images[192:], labels[192:]))

rescale = layers.Rescaling(1.0 / 255)

data_augmentation = [
    layers.RandomFlip("horizontal_and_vertical"),
    layers.RandomRotation(0.3),
    layers.RandomZoom(0.2),
]


# Helper to apply augmentation
def apply_aug(x):
    for aug in data_augmentation:
        x = aug(x)
    return x


def prepare(ds, shuffle=False, augment=False):
    # Rescale dataset
    ds = ds.map(lambda x, y: (rescale(tf.image.resize(x, (image_size, image_size))), y), num_parallel_calls=AUTOTUNE)

    if shuffle:
        ds = ds.shuffle(1024)

    # Batch dataset
    ds = ds.batch(batch_size)

    # Use data augmentation only on the training set
    if augment:
        ds = ds.map(
            lambda x, y: (apply_aug(x), y),
            num_parallel_calls=AUTOTUNE,
        )

    # Use buffered prefecting
    return ds.prefetch(buffer_size=AUTOTUNE)


train_ds = prepare(train_ds, shuffle=True, augment=True)
test_ds = prepare(test_ds)


def make_model():
    model = keras.Sequential(
        [
            layers.Input(shape=(image_size, image_size, 3)),
            layers.Conv2D(16, (3, 3), activation="relu"),
            layers.MaxPooling2D(2, 2),
            layers.Conv2D(32, (3, 3), activation="relu"),
            layers.Dropout(0.5),
            layers.MaxPooling2D(2, 2),
            layers.Conv2D(32, (3, 3), activation="relu"),
            layers.MaxPooling2D(2, 2),
            layers.Flatten(),
            layers.Dropout(0.5),
            layers.Dense(64, activation="relu"),
            layers.Dense(1, activation="sigmoid"),
        ]
    )
    return model


# Keras 3's optimizers have no get_gradients(): the gradients are centralized in apply(), before the update.
class GCRMSprop(RMSprop):
    def apply(self, grads, trainable_variables=None):
        # We here just provide a modified apply() function since we are
        # trying to just compute the centralized gradients.

        centralized = []
        for grad in grads:
            grad_len = len(grad.shape)
            if grad_len > 1:
                axis = list(range(grad_len - 1))
                grad -= ops.mean(grad, axis=axis, keepdims=True)
            centralized.append(grad)

        return super().apply(centralized, trainable_variables)


optimizer = GCRMSprop(learning_rate=1e-3)


class TimeHistory(keras.callbacks.Callback):
    def on_train_begin(self, logs={}):
        self.times = []

    def on_epoch_begin(self, batch, logs={}):
        self.epoch_time_start = time()

    def on_epoch_end(self, batch, logs={}):
        self.times.append(time() - self.epoch_time_start)


time_callback_gc = TimeHistory()
model = make_model()
model.compile(loss="binary_crossentropy", optimizer=optimizer, metrics=["accuracy"])
"""

CENTRALIZATION_FIT = """history_gc = model.fit(train_ds, epochs=6, verbose=0, callbacks=[time_callback_gc])
"""

CENTRALIZATION_CHECK = """
print("Epoch Time Taken: ", time_callback_gc.times)
test_loss, test_acc = model.evaluate(test_ds, verbose=0)
"""


def test_gradient_centralization_optimizer(shell):
    """Gradient Centralization: an RMSprop subclass centralizing the gradients in `apply`, made and compiled in a
    plain cell; the notebook's optimizer comes back the same object, holding the training (iterations, slots), and the
    TimeHistory callback holds an epoch time per epoch."""
    _cell(shell, CENTRALIZATION)
    _cell(shell, CENTRALIZATION_FIT)
    one = _cell(shell, CENTRALIZATION_CHECK)
    one = {"loss": one["history_gc"].history["loss"][-1], "acc": one["test_acc"]}
    ns = _cell(shell, CENTRALIZATION)
    model, optimizer, timer = ns["model"], ns["optimizer"], ns["time_callback_gc"]
    ns = _cell(shell, CENTRALIZATION_FIT, distribute=True)
    assert ns["model"] is model and ns["optimizer"] is optimizer and model.optimizer is optimizer
    assert type(optimizer).__name__ == "GCRMSprop" and type(optimizer) is ns["GCRMSprop"]
    assert ns["time_callback_gc"] is timer and len(timer.times) == 6
    assert int(optimizer.iterations.numpy()) == 6 * 3  # 192 images in batches of 32: 3 a rank
    velocities = [v for v in optimizer.variables if "velocity" in v.path]
    assert velocities and all(np.abs(v.numpy()).sum() > 0 for v in velocities), [v.path for v in velocities]
    ns = _cell(shell, CENTRALIZATION_CHECK)
    close(ns["history_gc"].history["loss"][-1], one["loss"], 1.5, "gradient-centralized training loss")
    assert ns["test_acc"] > 0.8 and ns["test_acc"] > one["acc"] - 0.15, (ns["test_acc"], one["acc"])


# ---------------------------------------------------------------------------------------- timeseries anomalies

ANOMALY = """
import numpy as np
import pandas as pd
import keras
from keras import layers

keras.utils.set_random_seed(0)

# NAB's art_daily_small_noise / art_daily_jumpsup shapes: a daily pattern every 5 minutes (here 32 points a day),
# the test series with a jump up in it. Batches of 32, not 128: enough steps for EarlyStopping to end the fit.
rng = np.random.default_rng(0)
index = pd.date_range("2014-04-01", periods=1024, freq="5min", name="timestamp")
daily = 20 + 40 * (np.arange(1024) % 32 >= 16) + rng.uniform(0, 20, 1024)
df_small_noise = pd.DataFrame({"value": daily}, index=index)
jumps = 20 + 40 * (np.arange(1024) % 32 >= 16) + rng.uniform(0, 20, 1024)
jumps[600:660] += 100
df_daily_jumpsup = pd.DataFrame({"value": jumps}, index=index)

# Normalize and save the mean and std we get,
# for normalizing test data.
training_mean = df_small_noise.mean()
training_std = df_small_noise.std()
df_training_value = (df_small_noise - training_mean) / training_std

TIME_STEPS = 32


# Generated training sequences for use in the model.
def create_sequences(values, time_steps=TIME_STEPS):
    output = []
    for i in range(len(values) - time_steps + 1):
        output.append(values[i : (i + time_steps)])
    return np.stack(output)


x_train = create_sequences(df_training_value.values)

model = keras.Sequential(
    [
        layers.Input(shape=(x_train.shape[1], x_train.shape[2])),
        layers.Conv1D(filters=32, kernel_size=7, padding="same", strides=2, activation="relu"),
        layers.Dropout(rate=0.2),
        layers.Conv1D(filters=16, kernel_size=7, padding="same", strides=2, activation="relu"),
        layers.Conv1DTranspose(filters=16, kernel_size=7, padding="same", strides=2, activation="relu"),
        layers.Dropout(rate=0.2),
        layers.Conv1DTranspose(filters=32, kernel_size=7, padding="same", strides=2, activation="relu"),
        layers.Conv1DTranspose(filters=1, kernel_size=7, padding="same"),
    ]
)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.001), loss="mse")
"""

ANOMALY_FIT = """history = model.fit(
    x_train,
    x_train,
    epochs=50,
    batch_size=32,
    validation_split=0.1,
    callbacks=[keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, mode="min")],
    verbose=0,
)
"""

ANOMALY_CHECK = """
# Get train MAE loss.
x_train_pred = model.predict(x_train, verbose=0)
train_mae_loss = np.mean(np.abs(x_train_pred - x_train), axis=1)

# Get reconstruction loss threshold.
threshold = np.max(train_mae_loss)
print("Reconstruction error threshold: ", threshold)

df_test_value = (df_daily_jumpsup - training_mean) / training_std

# Create sequences from test values.
x_test = create_sequences(df_test_value.values)

# Get test MAE loss.
x_test_pred = model.predict(x_test, verbose=0)
test_mae_loss = np.mean(np.abs(x_test_pred - x_test), axis=1)
test_mae_loss = test_mae_loss.reshape((-1))

# Detect all the samples which are anomalies.
anomalies = test_mae_loss > threshold
print("Number of anomaly samples: ", np.sum(anomalies))

# data i is an anomaly if samples [(i - timesteps + 1) to (i)] are anomalies
anomalous_data_indices = []
for data_idx in range(TIME_STEPS - 1, len(df_test_value) - TIME_STEPS + 1):
    if np.all(anomalies[data_idx - TIME_STEPS + 1 : data_idx]):
        anomalous_data_indices.append(data_idx)
"""


def test_timeseries_anomaly_autoencoder(shell):
    """Timeseries anomaly detection: a Conv1D / Conv1DTranspose autoencoder fit on (x_train, x_train) with
    validation_split and EarlyStopping(val_loss, patience=2), then the MAE threshold; the ranks stop together, the
    notebook's model is trained and finds the jump in the test series where one process does."""
    _cell(shell, ANOMALY)
    _cell(shell, ANOMALY_FIT)
    one = _cell(shell, ANOMALY_CHECK)
    one = {"val": one["history"].history["val_loss"], "found": set(one["anomalous_data_indices"])}
    ns = _cell(shell, ANOMALY)
    model = ns["model"]
    ns = _cell(shell, ANOMALY_FIT, distribute=True)
    assert ns["model"] is model
    # EarlyStopping ends the run before its 50 epochs (patience 2, not the tutorial's 5: on 2 ranks val_loss still
    # creeps down at epoch 50 and patience 5 never ran out, so nothing here showed the ranks stopping together): the
    # ranks see the same averaged val_loss, so they stop at the same epoch (a rank going on alone would wait forever
    # in its next allreduce).
    epochs = len(ns["history"].history["val_loss"])
    assert ns["history"].epoch == list(range(epochs)) and epochs < 50, epochs
    assert int(model.optimizer.iterations.numpy()) == epochs * 14  # 894 sequences in batches of 32: 28, 14 a rank
    ns = _cell(shell, ANOMALY_CHECK)
    val = ns["history"].history["val_loss"]
    assert val[-1] < val[0] / 3, val
    close(min(val), min(one["val"]), 2, "autoencoder best val_loss")
    found = set(ns["anomalous_data_indices"])
    assert one["found"] and found and found <= set(range(600, 692)), sorted(found)
    assert len(found & one["found"]) >= len(one["found"]) // 2, (sorted(found), sorted(one["found"]))
