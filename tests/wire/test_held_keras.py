"""Models and optimizers held by objects of the notebook's own classes, trained by their methods under
`%%distribute -n 2` (real 2-rank jobs): the agent classes of reinforcement-learning posts and tutorials.

An `Agent` holding `self.model` and `self.optimizer`, trained by its own GradientTape method; and the DQN agent
of the well-known Keras CartPole post (`self.memory = deque(maxlen=2000)`, epsilon decay, `self.model.fit(state,
target_f, epochs=1, verbose=0)` on one transition at a time in `replay`). The cell names only `agent`: the models
inside it must come back into the notebook's agent, trained as one process trains them, with its plain state."""

import numpy as np
import pytest
from notebook_cells import cell

AGENT = """
import numpy as np
import keras
import tensorflow as tf

keras.utils.set_random_seed(0)


class Agent:
    def __init__(self):
        self.model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)]
        )
        self.optimizer = keras.optimizers.Adam(1e-2)
        self.steps = 0
        self.losses = []

    def train(self, x, y):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((self.model(x) - y) ** 2)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.steps += 1
        self.losses.append(float(loss))


agent = Agent()
x = np.random.rand(64, 4).astype("float32")
y = np.random.rand(64, 2).astype("float32")
"""

AGENT_TRAIN = """
for _ in range(20):
    agent.train(x, y)
"""


def test_an_agent_s_model_and_optimizer_trained_by_its_method_come_back_into_the_notebook_s_agent(shell):
    one = cell(shell, AGENT)
    cell(shell, AGENT_TRAIN)
    expected = {"weights": one["agent"].model.get_weights(), "losses": list(one["agent"].losses)}

    ns = cell(shell, AGENT)
    agent, model, optimizer = ns["agent"], ns["agent"].model, ns["agent"].optimizer
    ns = cell(shell, AGENT_TRAIN, distribute=True)
    assert ns["agent"] is agent and agent.model is model and agent.optimizer is optimizer
    assert int(optimizer.iterations.numpy()) == 20 and agent.steps == 20
    for got, want in zip(model.get_weights(), expected["weights"]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(agent.losses, expected["losses"], rtol=1e-4)
    # The next cell goes on from the notebook's optimizer state, in one process.
    cell(shell, "agent.train(x, y)")
    assert int(optimizer.iterations.numpy()) == 21


DQN = """
import random
from collections import deque

import numpy as np
import keras

keras.utils.set_random_seed(0)


class DQNAgent:
    def __init__(self, state_size, action_size):
        self.state_size = state_size
        self.action_size = action_size
        self.memory = deque(maxlen=2000)
        self.gamma = 0.95    # discount rate
        self.epsilon = 1.0  # exploration rate
        self.epsilon_min = 0.01
        self.epsilon_decay = 0.995
        self.learning_rate = 0.001
        self.model = self._build_model()

    def _build_model(self):
        # Neural Net for Deep-Q learning Model
        model = keras.Sequential()
        model.add(keras.layers.Dense(24, input_dim=self.state_size, activation='relu'))
        model.add(keras.layers.Dense(24, activation='relu'))
        model.add(keras.layers.Dense(self.action_size, activation='linear'))
        model.compile(loss='mse', optimizer=keras.optimizers.Adam(learning_rate=self.learning_rate))
        return model

    def remember(self, state, action, reward, next_state, done):
        self.memory.append((state, action, reward, next_state, done))

    def act(self, state):
        if np.random.rand() <= self.epsilon:
            return random.randrange(self.action_size)
        act_values = self.model.predict(state, verbose=0)
        return np.argmax(act_values[0])  # returns action

    def replay(self, batch_size):
        minibatch = random.sample(self.memory, batch_size)
        for state, action, reward, next_state, done in minibatch:
            target = reward
            if not done:
                target = (reward + self.gamma * np.amax(self.model.predict(next_state, verbose=0)[0]))
            target_f = self.model.predict(state, verbose=0)
            target_f[0][action] = target
            self.model.fit(state, target_f, epochs=1, verbose=0)
        if self.epsilon > self.epsilon_min:
            self.epsilon *= self.epsilon_decay


class CartPoleLike:
    \"\"\"A stand-in for gym's CartPole (no gym here): 4 numbers of state, 2 actions, reward 1 a step.\"\"\"

    def reset(self):
        self.t = 0
        self.s = np.random.uniform(-0.05, 0.05, 4)
        return self.s

    def step(self, action):
        self.t += 1
        self.s = self.s + np.array([0.01, 0.02, -0.01, 0.03]) * (1 if action else -1)
        return self.s, 1.0, self.t >= 8 or abs(self.s[0]) > 0.2, {}


env = CartPoleLike()
state_size, action_size = 4, 2
agent = DQNAgent(state_size, action_size)
batch_size = 4
EPISODES = 2
"""

DQN_TRAIN = """
for e in range(EPISODES):
    state = env.reset()
    state = np.reshape(state, [1, state_size])
    for time in range(500):
        action = agent.act(state)
        next_state, reward, done, _ = env.step(action)
        reward = reward if not done else -10
        next_state = np.reshape(next_state, [1, state_size])
        agent.remember(state, action, reward, next_state, done)
        state = next_state
        if done:
            print("episode: {}/{}, score: {}, e: {:.2}".format(e, EPISODES, time, agent.epsilon))
            break
        if len(agent.memory) > batch_size:
            agent.replay(batch_size)
"""


@pytest.mark.parametrize("backend", ["horovod", "tf"])
def test_the_dqn_agent_fits_one_transition_at_a_time_and_comes_back_with_its_memory_and_epsilon(shell, backend):
    one = cell(shell, DQN)
    cell(shell, DQN_TRAIN)
    agent = one["agent"]
    expected = {
        "epsilon": agent.epsilon,
        "memory": len(agent.memory),
        "iterations": int(agent.model.optimizer.iterations.numpy()),
        "weights": agent.model.get_weights(),
    }
    assert expected["iterations"] > 0 and expected["epsilon"] < 1.0

    ns = cell(shell, DQN)
    agent, model = ns["agent"], ns["agent"].model
    ns = cell(shell, DQN_TRAIN, distribute=True, backend=backend)
    assert ns["agent"] is agent and agent.model is model
    assert agent.epsilon == pytest.approx(expected["epsilon"])
    assert len(agent.memory) == expected["memory"] and agent.memory.maxlen == 2000
    assert int(model.optimizer.iterations.numpy()) == expected["iterations"]
    # Every rank fit the one transition whole, at the cell's rate: the averaged update is one process's.
    for got, want in zip(model.get_weights(), expected["weights"]):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
    # The notebook's agent goes on in a plain cell, from the memory it came back with.
    cell(shell, "agent.replay(batch_size)")
    assert int(model.optimizer.iterations.numpy()) == expected["iterations"] + 4


TRAINER = """
import keras

keras.utils.set_random_seed(0)


class Trainer:
    def __init__(self, model, name="run"):
        self.model = model
        self.name = name
        self.history = None
        self.results = {}

    def train(self, x, y, epochs):
        self.history = self.model.fit(x, y, epochs=epochs, batch_size=64, verbose=0)
        self.results["final_loss"] = self.history.history["loss"][-1]
        return self.history


model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
trainer = Trainer(model)
"""


def test_a_trainer_class_keeps_the_history_its_method_set_and_its_model_trains(shell, digits):
    shell.user_ns.update(digits)
    ns = cell(shell, TRAINER)
    model = ns["model"]
    ns = cell(shell, "trainer.train(x_train, y_train, 3)", distribute=True)  # the cell names only `trainer`
    trainer = ns["trainer"]
    assert (
        trainer.model is model and int(model.optimizer.iterations.numpy()) == 3 * 11
    )  # 700 samples a rank, 64 a batch
    assert trainer.history.epoch == [0, 1, 2] and len(trainer.history.history["accuracy"]) == 3
    assert trainer.results["final_loss"] == trainer.history.history["loss"][-1] < trainer.history.history["loss"][0]


AGENTS = """
import numpy as np
import keras
import tensorflow as tf
keras.utils.set_random_seed(0)

def net():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])

class Agent:
    def __init__(self):
        self.nets = {"actor": net(), "critic": net()}
        self.optimizer = keras.optimizers.Adam(1e-2)
        self.steps = 0

    def train(self, x, y):
        variables = self.nets["actor"].trainable_variables + self.nets["critic"].trainable_variables
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((self.nets["actor"](x) + self.nets["critic"](x) - y) ** 2)
        grads = tape.gradient(loss, variables)
        self.optimizer.apply_gradients(zip(grads, variables))
        self.steps += 1

agents = [Agent(), Agent()]
x = np.random.rand(64, 4).astype("float32")
y = np.random.rand(64, 2).astype("float32")
"""
AGENTS_TRAIN = """
for _ in range(5):
    for agent in agents:
        agent.train(x, y)
"""


def test_agents_in_a_list_with_their_networks_in_a_dict_and_one_optimizer_over_both(shell):
    """The optimizer was built over two models of a dict attribute: each model comes back by a name of its own
    (`agents[0].nets['actor']`), so the optimizer's state finds its variables and comes back too."""
    cell(shell, AGENTS)
    ns = cell(shell, AGENTS_TRAIN)
    expected = [agent.nets["actor"].get_weights() for agent in ns["agents"]]

    ns = cell(shell, AGENTS)
    agents = list(ns["agents"])
    nets = [dict(agent.nets) for agent in agents]
    ns = cell(shell, AGENTS_TRAIN, distribute=True)
    for i, agent in enumerate(ns["agents"]):
        assert agent is agents[i] and agent.nets == nets[i] and agent.steps == 5
        assert all(agent.nets[k] is nets[i][k] for k in ("actor", "critic"))
        assert int(agent.optimizer.iterations.numpy()) == 5
        for got, want in zip(agent.nets["actor"].get_weights(), expected[i]):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


NETS = """
import numpy as np
import keras
import tensorflow as tf

keras.utils.set_random_seed(0)


def net():
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])


nets = {"actor": net(), "critic": net()}
ensemble = [net(), net()]
optimizer = keras.optimizers.Adam(1e-2)
ensemble_optimizer = keras.optimizers.Adam(1e-2)
x = np.random.rand(64, 4).astype("float32")
y = np.random.rand(64, 2).astype("float32")
"""

NETS_TRAIN = """
for _ in range(5):
    variables = nets["actor"].trainable_variables + nets["critic"].trainable_variables
    with tf.GradientTape() as tape:
        loss = keras.ops.mean((nets["actor"](x) + nets["critic"](x) - y) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    variables = ensemble[0].trainable_variables + ensemble[1].trainable_variables
    with tf.GradientTape() as tape:
        loss = keras.ops.mean((ensemble[0](x) + ensemble[1](x) - y) ** 2)
    ensemble_optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
"""


def test_an_optimizer_over_the_models_of_a_notebook_dict_or_list_comes_back_with_its_state(shell):
    """The optimizer came back as an unbuilt copy (iterations 0): its variables were placed only in models the
    notebook has by a name of their own, not in a dict or list of them."""
    ns = cell(shell, NETS)
    optimizers = ns["optimizer"], ns["ensemble_optimizer"]
    ns = cell(shell, NETS_TRAIN, distribute=True)
    assert (ns["optimizer"], ns["ensemble_optimizer"]) == optimizers
    for optimizer in optimizers:
        assert optimizer.built and int(optimizer.iterations.numpy()) == 5
    cell(shell, NETS_TRAIN)  # goes on in one process from that state
    assert int(ns["optimizer"].iterations.numpy()) == 10
