"""golden/training/: a small model built on nn.MultiheadAttention, trained by PyTorch.

golden/training/reverse/ is the start of one training run, for tutorial 18 to follow
step by step: a model learns to reverse sequences of tokens, with torch.optim.Adam. The
folder holds the parameters before the first step and after the last, the batches of
every step, and the loss of every step."""

import torch
import torch.nn.functional as F

from .draws import pytorch_init_drawn_in_float64, seed_for
from .files import FORMAT_VERSION, new_folder, save_npy, write_json
from .runner import slow_path_only

# The task and the model (the sizes), and the optimizer. Tutorial 18 states the same.
REVERSE = {"vocab": 8, "length": 8, "embed_dim": 16, "num_heads": 2, "batch": 32,
           "steps": 20, "lr": 0.01}


class Reverser(torch.nn.Module):
    """tokens (N, L) -> logits (L, N, V): a token embedding plus a learned position
    embedding, one self-attention layer, and a linear readout to one logit per token."""

    def __init__(self, vocab: int, length: int, embed_dim: int, num_heads: int):
        super().__init__()
        f64 = {"dtype": torch.float64}
        self.embedding = torch.nn.Embedding(vocab, embed_dim, **f64)        # N(0, 1)
        self.position = torch.nn.Parameter(torch.empty(length, embed_dim, **f64))
        torch.nn.init.normal_(self.position)                               # N(0, 1)
        # No attention biases: the key bias's gradient is zero but for round-off, which Adam,
        # dividing by a gradient's size, would make differ by a million ULPs between CPUs.
        self.attention = torch.nn.MultiheadAttention(embed_dim, num_heads, bias=False, **f64)
        self.readout = torch.nn.Linear(embed_dim, vocab, **f64)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = (self.embedding(tokens) + self.position).transpose(0, 1)  # (L, N, E)
        y, _ = self.attention(x, x, x, need_weights=False)             # (L, N, E)
        return self.readout(y)                                         # (L, N, V)


def reverse_loss(model: Reverser, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of the logits against the targets, over the N*L tokens."""
    logits = model(tokens)                                    # (L, N, V)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.transpose(0, 1).reshape(-1))


def save_state_dict(folder, model: torch.nn.Module) -> None:
    for name, tensor in model.state_dict().items():
        save_npy(folder, name, tensor)


def write_reverse(out) -> None:
    """reverse/: the model initialised by PyTorch (its draws made in float64), `steps`
    batches of `batch` sequences of `length` tokens drawn uniformly from the vocabulary,
    the targets (each sequence reversed), and `steps` steps of Adam (lr, PyTorch's
    defaults otherwise): the loss at each step, before its update, and the parameters
    after the last update."""
    s = REVERSE
    torch.manual_seed(seed_for("training_reverse"))
    with pytorch_init_drawn_in_float64():
        model = Reverser(s["vocab"], s["length"], s["embed_dim"], s["num_heads"])
    tokens = torch.randint(s["vocab"], (s["steps"], s["batch"], s["length"]))  # (K, N, L)
    targets = tokens.flip(-1)                                                 # reversed

    folder = new_folder(out / "reverse")
    save_state_dict(new_folder(folder / "initial"), model)
    optimizer = torch.optim.Adam(model.parameters(), lr=s["lr"])
    losses = []
    with slow_path_only([]):
        for step in range(s["steps"]):
            optimizer.zero_grad()
            loss = reverse_loss(model, tokens[step], targets[step])
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
    save_state_dict(new_folder(folder / "final"), model)
    save_npy(folder, "tokens", tokens.to(torch.int32))
    save_npy(folder, "targets", targets.to(torch.int32))
    save_npy(folder, "loss", torch.stack(losses))
    document = {"format": FORMAT_VERSION, "task": "reverse", "dtype": "float64", **s,
                "optimizer": "torch.optim.Adam", "betas": [0.9, 0.999], "eps": 1e-8,
                "parameters": list(model.state_dict())}
    write_json(folder / "training.json", document)


def generate_training(out) -> int:
    """golden/training/: reverse/ (see write_reverse)."""
    out.mkdir(parents=True, exist_ok=True)
    write_reverse(out)
    return 1
