#!/usr/bin/env python3
"""The PyTorch peer of Sparrow's DeepFM (issue 19): the same model, the same sizes, the same
optimizer, trained one pass over the same examples, scored on the same held-out file.

usage: bench/deepfm_torch.py TRAIN.jsonl HELDOUT.jsonl [--fields F1,F2,...] [--k 8]
                             [--mlp 128,64] [--batch 1024] [--lr 0.05] [--eps 1e-3]
                             [--init-scale 0.01] [--dense-opt adagrad|adam] [--dense-lr LR]
                             [--threads N] [--model fm|deepfm]
Prints one JSON object: examples, heldout, logloss, auc, const_logloss, bayes_logloss, train_s,
ex_per_s (training loop only: the examples were read, indexed and made tensors before the clock
starts, which favours PyTorch over Sparrow, whose figure includes reading its input), threads.

The model is Sparrow's (trainer/include/sparrow/trainer.h, struct spw_model): per feature a row
[w, v_1..v_k] uniform in +-init_scale; logit = bias + sum w + FM pairwise term of the v's + an
MLP over the concatenation, in field order, of the fields' v's (ReLU hidden layers, one linear
output; hidden layers He-uniform, the output Glorot-uniform, biases zero, as
dense/src/dense_spec.c). Every parameter on Adagrad (eps; accumulators from zero) as on Sparrow's
shards: the rows through sparse gradients at --lr, the MLP at --dense-lr (0.005 as Sparrow's
pserver.lr.dense); --dense-opt adam puts the MLP on Adam (1e-3 unless --dense-lr).
A feature is its (field, value) pair; one the training pass never saw scores with a zero row, as
sparrow eval scores a key absent from the checkpoint. The examples (gen --format json) carry one
value per field, so each field is one embedding lookup (no pooling)."""

import argparse
import json
import math
import sys
import time

import numpy as np
import torch


def read(path, fields, vocab, grow):
    """Feature indices (n x F, int64; 0: unseen), labels, oracle_p."""
    idx, labels, oracle = [], [], []
    with open(path) as f:
        for line in f:
            ex = json.loads(line)
            feats = ex["features"]
            row = []
            for fi, name in enumerate(fields):
                v = feats.get(name)
                if v is None:
                    row.append(0)
                    continue
                key = (fi, v)
                j = vocab.get(key)
                if j is None:
                    j = len(vocab) + 1 if grow else 0
                    if grow:
                        vocab[key] = j
                row.append(j)
            idx.append(row)
            labels.append(float(ex["label"]))
            oracle.append(ex.get("oracle_p"))
    return np.array(idx, dtype=np.int64), np.array(labels, dtype=np.float32), oracle


class DeepFM(torch.nn.Module):
    def __init__(self, rows, n_fields, k, hidden, init_scale, deep):
        super().__init__()
        self.k, self.deep = k, deep
        self.emb = torch.nn.Embedding(rows, 1 + k, sparse=True)
        with torch.no_grad():
            self.emb.weight.uniform_(-init_scale, init_scale)
            self.emb.weight[0].zero_()  # unseen features
        self.bias = torch.nn.Parameter(torch.zeros(1))
        layers, width = [], n_fields * k
        for h in hidden:
            lin = torch.nn.Linear(width, h)
            lim = math.sqrt(6.0 / width)
            torch.nn.init.uniform_(lin.weight, -lim, lim)
            torch.nn.init.zeros_(lin.bias)
            layers += [lin, torch.nn.ReLU()]
            width = h
        out = torch.nn.Linear(width, 1)
        lim = math.sqrt(6.0 / (width + 1))
        torch.nn.init.uniform_(out.weight, -lim, lim)
        torch.nn.init.zeros_(out.bias)
        self.mlp = torch.nn.Sequential(*layers, out)

    def forward(self, idx):
        e = self.emb(idx)  # n x F x (1 + k)
        w, v = e[:, :, 0], e[:, :, 1:]
        s = v.sum(1)
        fm = 0.5 * (s * s - (v * v).sum(1)).sum(1)
        logit = self.bias + w.sum(1) + fm
        if self.deep:
            logit = logit + self.mlp(v.reshape(v.shape[0], -1)).squeeze(1)
        return logit


def logloss(p, y):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def auc(p, y):
    order = np.argsort(p, kind="mergesort")
    ranks = np.empty(len(p))
    sp = p[order]
    i = 0
    while i < len(sp):  # average ranks of ties
        j = i
        while j + 1 < len(sp) and sp[j + 1] == sp[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    pos = y.sum()
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return None
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("train")
    ap.add_argument("heldout")
    ap.add_argument("--fields", default=",".join(["I%d" % i for i in range(1, 14)] +
                                                 ["C%d" % i for i in range(1, 27)]))
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--mlp", default="128,64")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--eps", type=float, default=1e-3)
    ap.add_argument("--init-scale", type=float, default=0.01)
    ap.add_argument("--dense-opt", choices=["adagrad", "adam", "rmsprop"], default="adagrad")
    ap.add_argument("--dense-lr", type=float, default=None)  # adagrad: 0.005, Sparrow's default
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--model", choices=["fm", "deepfm"], default="deepfm")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    fields = [f for f in a.fields.split(",") if f]
    hidden = [int(h) for h in a.mlp.split(",") if h]
    vocab = {}
    xtr, ytr, _ = read(a.train, fields, vocab, True)
    xte, yte, ote = read(a.heldout, fields, vocab, False)
    model = DeepFM(len(vocab) + 1, len(fields), a.k, hidden, a.init_scale, a.model == "deepfm")
    sparse = torch.optim.Adagrad([model.emb.weight], lr=a.lr, eps=a.eps)
    dense_params = [model.bias] + list(model.mlp.parameters())
    dlr = a.dense_lr if a.dense_lr is not None else (0.005 if a.dense_opt == "adagrad" else 1e-3)
    if a.dense_opt == "adagrad":
        dense = torch.optim.Adagrad(dense_params, lr=dlr, eps=a.eps)
    elif a.dense_opt == "adam":
        dense = torch.optim.Adam(dense_params, lr=dlr)
    else:
        dense = torch.optim.RMSprop(dense_params, lr=dlr, alpha=0.999, eps=1e-8)
    lossf = torch.nn.BCEWithLogitsLoss()
    xt, yt = torch.from_numpy(xtr), torch.from_numpy(ytr)
    n = len(ytr)
    t0 = time.perf_counter()
    for s in range(0, n, a.batch):
        xb, yb = xt[s:s + a.batch], yt[s:s + a.batch]
        sparse.zero_grad()
        dense.zero_grad()
        loss = lossf(model(xb), yb)
        loss.backward()
        sparse.step()
        dense.step()
    train_s = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        p = torch.sigmoid(model(torch.from_numpy(xte))).numpy().astype(np.float64)
    ctr = float(yte.mean())
    out = {"model": a.model, "examples": n, "heldout": len(yte), "logloss": logloss(p, yte),
           "auc": auc(p, yte), "const_logloss": logloss(np.full(len(yte), ctr), yte),
           "bayes_logloss": None, "train_s": round(train_s, 3),
           "ex_per_s": round(n / train_s) if train_s > 0 else None,
           "threads": torch.get_num_threads(), "dense_opt": a.dense_opt, "dense_lr": dlr,
           "rows": len(vocab), "torch": torch.__version__}
    if all(o is not None for o in ote):
        out["bayes_logloss"] = logloss(np.array(ote, dtype=np.float64), yte)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
