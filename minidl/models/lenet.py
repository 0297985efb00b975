"""LeNet-5 (LeCun et al. 1998) as Ben-Nun & Hoefler's §3.3.1 describes it.

conv 6@5x5 (pad 2 on 28x28 inputs, so the feature maps are 28x28 as in the
original's 32x32 input) -> pool 2 -> conv 16@5x5 -> pool 2 -> fc 120 -> fc 84
-> fc num_classes. Max pooling and full C3 connectivity as in Ben-Nun & Hoefler 2019;
61,706 parameters for 28x28 inputs and 10 classes.

The activation follows each pooling layer, as in the original (its S2 and S4
layers squash after subsampling). For max pooling and a monotonic activation
(ReLU, tanh) the order does not change the function or its gradient, since
max(f(a), f(b)) = f(max(a, b)); applied after pooling it touches 4x fewer values.
"""

from .. import layers as L
from .activations import activation_layer


def lenet5(
    num_classes: int = 10, in_channels: int = 1, activation: str = "relu", conv_algo: str = "auto"
) -> L.Sequential:
    """LeNet-5 for (N, in_channels, 28, 28) inputs."""
    act = activation_layer(activation, "lenet5")
    return L.Sequential(
        L.Conv2d(in_channels, 6, 5, padding=2, algo=conv_algo),
        L.MaxPool2d(2),
        act(),
        L.Conv2d(6, 16, 5, algo=conv_algo),
        L.MaxPool2d(2),
        act(),
        L.Flatten(),
        L.Linear(16 * 5 * 5, 120),
        act(),
        L.Linear(120, 84),
        act(),
        L.Linear(84, num_classes),
    )
