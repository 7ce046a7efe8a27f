"""classifier.py - the PyTorch module behind samples/classifier.sg.

samples/classifier.sg was made from it with tools/fx2sg:

    tools/fx2sg samples/classifier.py:Classifier -o samples/classifier.sg \
        --graph classifier --input x=f32[8,32] --outputs probs

(add --params classifier.safetensors to get the module's weights; without
them, sgc run and the generated driver initialise params from --seed).
"""
import torch.nn as nn


class Classifier(nn.Module):
    """A layer-norm classifier: linear, layer norm, GELU, linear, softmax."""

    def __init__(self, d_in=32, d_hidden=64, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.norm = nn.LayerNorm(d_hidden)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(d_hidden, classes)

    def forward(self, x):
        h = self.drop(self.act(self.norm(self.fc1(x))))
        return self.fc2(h).softmax(dim=-1)
