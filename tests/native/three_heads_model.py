"""A user model with three outputs (imported as ``three_heads_model:three_heads``): class logits,
a feature vector, and one score per sample, for the native runner's every-output check."""


def three_heads():
    import torch
    from torch import nn

    class ThreeHeads(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.body = nn.Linear(12, 16)
            self.classes = nn.Linear(16, 4)
            self.features = nn.Linear(16, 6)
            self.score = nn.Linear(16, 1)

        def forward(self, x):
            h = torch.relu(self.body(x))
            return self.classes(h), self.features(h), torch.sigmoid(self.score(h))

    return ThreeHeads()
