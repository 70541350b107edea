"""Models whose batch is not the first dimension of their inputs, as their
authors wrote them (sequence-first, `[T, B]`):
  * PyTorch's word_language_model TransformerModel (examples/
    word_language_model/model.py: a subclass of nn.Transformer using its
    encoder, a `log(tril(ones))` causal mask, the sin/cos PositionalEncoding
    buffer, log_softmax over [T, B, ntoken]), token ids [T, B] in, per-token
    labels [T, N];
  * nn.Transformer in its default layout (batch_first=False): source and
    target token ids [S, B] and [T, B], a causal tgt_mask, logits [T, B, V];
  * word_language_model's RNNModel (a two-layer nn.LSTM, sequence-first)
    with a zero state each batch: log-probabilities viewed [T * B, ntoken],
    per-token labels [T, N].
Each is compiled through the Python API from a plain static-batch export
with `batch_axis=1` (--batch-axis=1), and once more from a dynamic_axes
export that names dimension 1 'batch' (no flag). Data stays in the model's
layout throughout ([T, N] arrays). Checks:
  * inference (an eval export, dynamic batch) on 3 compiled batches of
    rows at once, split along dimension 1 by the runtime, within 1e-5 of
    PyTorch eval relative to the output's largest magnitude (float32
    rounding of a few hundred-term sums: ~1e-6 measured);
  * labels of the wrong shape are an error that describes the labels in
    the model's layout ([T, N]);
  * for the RNNModel's [T * B, V] log-probabilities, the evaluation after
    training (eval_data: accuracy equal, loss within 1e-5 of PyTorch's on
    the same trained weights, which are within 1e-6 of gpipe's);
  * training in a two-stage pipeline of 2 micro-batches, 10 SGD steps on
    [T, N] data in order, against PyTorch float32 on the same batches: the
    losses within 1e-5 relative and every parameter's relative L2 within
    1e-4 after the 10 steps (no dropout, no BatchNorm: only the order of
    float32 rounding differs (dropout set to 0 in the modules), measured
    ~1e-7 on losses; 10 steps of lr
    0.05 without momentum do not amplify it beyond 1e-5 on parameters).

usage: sequence_first.py WORK_DIR   (gpipe-opt and gpipe-run on PATH, or
GPIPE_OPT and GPIPE_RUN)
"""
import copy
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import gpipe
# word_language_model/model.py's PositionalEncoding, as written there.
from buffers_frozen import PositionalEncoding

STEPS, BATCH, SAMPLES, SEQ, VOCAB = 10, 8, 32, 10, 40
LR = 0.05


class TransformerModel(nn.Transformer):
    """word_language_model/model.py's, as written there."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super(TransformerModel, self).__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers)
        self.model_type = 'Transformer'
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)

        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz,sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None

        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


class RNNModel(nn.Module):
    """word_language_model/model.py's, as written there (LSTM and GRU)."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            try:
                nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            except KeyError as e:
                raise ValueError( """An invalid option for `--model` was supplied,
                                 options are ['LSTM', 'GRU', 'RNN_TANH' or 'RNN_RELU']""") from e
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)


class FreshHidden(nn.Module):
    """The RNNModel with a zero state each batch (main.py carries it from
    batch to batch, which a compiled step cannot): its log-probabilities
    [T * B, ntoken] only."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, src):
        return self.model(src, self.model.init_hidden(src.shape[1]))[0]


class SequenceToSequence(nn.Module):
    """nn.Transformer in its default layout: [S, B] and [T, B] token ids,
    logits [T, B, V]."""

    def __init__(self, dim=32):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.transformer = nn.Transformer(dim, 4, 1, 1, 64, dropout=0.0)
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, src, tgt):
        mask = self.transformer.generate_square_subsequent_mask(tgt.shape[0])
        out = self.transformer(self.embed(src), self.embed(tgt),
                               tgt_mask=mask)
        return self.head(out)


def without_dropout(model):
    """Dropout draws other masks than PyTorch's: off for the comparison
    (the model passes its dropout only to PositionalEncoding; nn.Transformer
    keeps its default 0.1 in the encoder layers)."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if hasattr(m, "dropout") and isinstance(m.dropout, float):
            m.dropout = 0.0
    return model


def cases(rng):
    tokens = lambda: rng.integers(0, VOCAB, (SEQ, SAMPLES))
    yield ("word_language_model TransformerModel",
           without_dropout(TransformerModel(VOCAB, 32, 4, 64, 2)),
           {"src": tokens()})
    yield "nn.Transformer (sequence-first)", SequenceToSequence(), {
        "src": tokens(), "tgt": tokens()}
    yield ("word_language_model RNNModel (LSTM)",
           FreshHidden(RNNModel("LSTM", VOCAB, 16, 24, 2, dropout=0.0)),
           {"src": tokens()})


def torch_replay(model, arrays, labels):
    """STEPS SGD steps on samples [i*B, (i+1)*B) of the [T, N] arrays, in
    order as train(shuffle=False) takes them; the mean per-token loss."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        cols = [(step * BATCH + j) % SAMPLES for j in range(BATCH)]
        inputs = [torch.from_numpy(a[:, cols]) for a in arrays.values()]
        out = model(*inputs)
        loss = F.cross_entropy(out.reshape(-1, VOCAB),
                               torch.from_numpy(labels[:, cols]).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(" ".join(command) + ": " + done.stderr)
    return done.stdout


def check_inference(name, model, arrays, work):
    """An eval export with dimension 1 named 'batch', compiled for a batch
    of BATCH, run on 3 * BATCH samples by gpipe-run --infer."""
    model.eval()
    names = list(arrays)
    example = tuple(torch.from_numpy(a[:, :BATCH]) for a in arrays.values())
    path = os.path.join(work, name.split()[0] + "_infer.onnx")
    torch.onnx.export(model, example, path, opset_version=17,
                      input_names=names, output_names=["out"],
                      dynamic_axes={**{n: {1: "batch"} for n in names},
                                    "out": {1: "batch"}})
    bundle = path[:-5] + ".gpipe"
    gpipe_opt = os.environ.get("GPIPE_OPT", "gpipe-opt")
    run([gpipe_opt, path, "--mode=infer", f"--batch-size={BATCH}", "-o",
         bundle])
    rows = 3 * BATCH
    flags = []
    for n, a in arrays.items():
        np.save(os.path.join(work, n + ".npy"), a[:, :rows])
        flags.append(f"--input={n}={os.path.join(work, n + '.npy')}")
    out_dir = os.path.join(work, name.split()[0] + "_out")
    gpipe_run = os.environ.get("GPIPE_RUN", "gpipe-run")
    run([gpipe_run, bundle, "--infer", f"--output={out_dir}"] + flags)
    got = np.load(os.path.join(out_dir, "out.npy"))
    with torch.no_grad():
        want = model(*(torch.from_numpy(a[:, :rows])
                       for a in arrays.values())).numpy()
    model.train()
    if got.shape != want.shape:
        return [f"inference output {got.shape}, PyTorch {want.shape}"], 0
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    return ([f"inference {err:.2e} from PyTorch eval (limit 1e-5)"]
            if err > 1e-5 else []), err


def check_training(name, model, arrays, work, how):
    failures = []
    labels = np.random.default_rng(1).integers(0, VOCAB, (SEQ, SAMPLES))
    example = tuple(torch.from_numpy(a[:, :BATCH]) for a in arrays.values())
    reference = copy.deepcopy(model)
    options = dict(devices="cpu:0,cpu:1", micro_batches=2, optimizer="sgd",
                   lr=LR, quiet=True)
    if how == "--batch-axis=1":
        bundle = gpipe.compile(model, example, batch_axis=1, **options)
    else:
        names = list(arrays)
        torch.onnx.export(
            model, example, os.path.join(work, "dynamic.onnx"),
            opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False, input_names=names,
            output_names=["output"],
            dynamic_axes={n: {1: "batch"} for n in names})
        # From a file, the buffers are the user's to name (--freeze).
        frozen = [n for n, _ in model.named_buffers()]
        bundle = gpipe.compile(os.path.join(work, "dynamic.onnx"),
                               batch_size=BATCH, freeze=frozen or None,
                               **options)
    # Per-token logits viewed [T * B, V] are evaluated too: accuracy and
    # loss over the tokens of the first 2 batches.
    evaluated = isinstance(reference, FreshHidden)
    held_out = {k: a[:, :2 * BATCH] for k, a in arrays.items()}
    result = bundle.train(
        dict(arrays, labels=labels), steps=STEPS, shuffle=False, quiet=True,
        eval_data=(dict(held_out, labels=labels[:, :2 * BATCH])
                   if evaluated else None))
    trained = bundle.parameters()
    losses = np.array(torch_replay(reference, arrays, labels))
    if evaluated:
        with torch.no_grad():
            out = reference(*(torch.from_numpy(a) for a in held_out.values()))
        want_labels = torch.from_numpy(labels[:, :2 * BATCH]).reshape(-1)
        out = out.reshape(-1, VOCAB)
        accuracy = float((out.argmax(1) == want_labels).double().mean())
        eval_loss = float(F.cross_entropy(out, want_labels))
        got_eval = result.evaluations[-1]
        if abs(got_eval["accuracy"] - accuracy) > 1e-9 or \
                abs(got_eval["loss"] - eval_loss) > 1e-5 * eval_loss:
            failures.append(f"{how}: evaluation {got_eval}, PyTorch accuracy "
                            f"{accuracy}, loss {eval_loss}")
    got = np.array(list(result), dtype=np.float64)
    loss_err = float(np.max(np.abs(got - losses) / np.abs(losses)))
    if not loss_err <= 1e-5:
        failures.append(f"{how}: losses {loss_err:.2e} from PyTorch "
                        f"(first {got[:3]} vs {losses[:3]})")
    worst = 0.0
    for n, p in reference.named_parameters():
        if p.grad is None:
            continue  # nn.Transformer's decoder, unused by the model
        if n not in trained:
            failures.append(f"{how}: parameter {n} not trained by gpipe")
            continue
        ref = p.detach().numpy()
        err = float(np.linalg.norm(np.asarray(trained[n]) - ref) /
                    np.linalg.norm(ref))
        worst = max(worst, err)
        if err > 1e-4:
            failures.append(f"{how}: parameter {n} {err:.2e} from PyTorch")
    # Data of the wrong shape is described in the model's layout.
    try:
        bundle.train(dict(arrays, labels=labels[:, :SAMPLES - 1]), steps=1,
                     quiet=True)
        failures.append(f"{how}: labels [T, N - 1] accepted")
    except gpipe.InputError as e:
        want = f"expected int64[{SEQ}, N]"
        if want not in str(e):
            failures.append(f"{how}: the error does not say '{want}': {e}")
    # A step on [T, B] data through Bundle.step too.
    cols = list(range(BATCH))
    step_loss = bundle.step(dict({k: a[:, cols] for k, a in arrays.items()},
                                 labels=labels[:, cols]))
    if not np.isfinite(step_loss):
        failures.append(f"{how}: step() loss {step_loss}")
    return failures, loss_err, worst


def main():
    work = sys.argv[1]
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    failures = []
    for name, model, arrays in cases(np.random.default_rng(0)):
        mine, err = check_inference(name, model, arrays, work)
        for how in ("--batch-axis=1", "dynamic_axes batch"):
            more, loss_err, param_err = check_training(
                name, copy.deepcopy(model), arrays, work, how)
            mine += more
            print(f"{'FAIL' if more else 'PASS'} {name}, {how}: losses "
                  f"{loss_err:.1e}, parameters {param_err:.1e} from PyTorch")
        print(f"{'FAIL' if mine else 'PASS'} {name}: inference {err:.1e} "
              f"from PyTorch eval")
        for f in mine:
            print(f"FAIL {name}: {f}")
        failures += mine
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
