"""resnet_small.py - the PyTorch module behind samples/resnet_small.sg: a
small ResNet (a 3x3 stem with BatchNorm and max pooling, two BasicBlocks,
the second strided with a 1x1 projection, global average pooling, a linear
classifier) for 32x32 images.

samples/resnet_small.sg was made from it with tools/fx2sg, in training
mode (BatchNorm normalises by the batch's statistics and updates its
running statistics, consts of the graph, in place), with the loss and the
optimizer:

    tools/fx2sg samples/resnet_small.py:resnet_small -o samples/resnet_small.sg \\
        --graph resnet_small --input x=f32[8,3,32,32] --train \\
        --loss cross_entropy --optimizer 'adamw(lr=0.001)' --trace fx

(add --params resnet_small.safetensors for the module's weights and
running statistics; without them sgc run and the generated driver
initialise params from --seed).  tests/torch/test_fx2sg.py exports this
module, checks the loss, every gradient and the running statistics
against PyTorch, and that the command above still gives this file.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm, and the shortcut (a strided
    1x1 convolution with BatchNorm when the shape changes)."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        s = x if self.down is None else self.down(x)
        return F.relu(h + s)


class SmallResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(8, 8)
        self.layer2 = BasicBlock(8, 16, 2)
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        h = self.pool(F.relu(self.bn(self.stem(x))))
        h = self.layer2(self.layer1(h))
        return self.fc(torch.flatten(self.avg(h), 1))


def resnet_small():
    torch.manual_seed(0)
    return SmallResNet()
