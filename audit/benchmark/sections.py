"""The benchmark page's smaller sections: the protocol, the supervised DP-SGD classifier, DP-FedEmb beside
DP-FedAvg, the ALM's mechanisms, and the run's time and memory (all from the reference)."""

from __future__ import annotations

from typing import Any, Mapping

from privaudit.audit.benchmark.claims import KNN, LINEAR
from privaudit.audit.benchmark.formatting import pct, with_interval
from privaudit.audit.benchmark.stats import accuracy_interval

TRAMER_BONEH = 86.0  # end-to-end CNN, F-MNIST, epsilon 3 (Tramer & Boneh 2021, Table 1)


def _first(reference: Mapping[str, Any], label: str) -> Mapping[str, Any] | None:
    return next((c for c in reference["cells"] if c["label"] == label), None)


def intro_lines(reference: Mapping[str, Any]) -> list[str]:
    """What was run: the suite, the data, the shared encoder and budget, delta."""
    gcl = _first(reference, "dp-gcl") or {}
    s = gcl.get("settings") or {}
    n_test = ((gcl.get("vs_init") or {}).get(LINEAR) or {}).get("n")
    return [f"Measured by suite `{reference['suite']}` at commit `{str(reference.get('commit'))[:7]}` "
            f"(privaudit {reference['version']}, {reference['device']}): every encoder trained from scratch on all "
            f"{gcl.get('n_train', '-')} training images (no public pretraining; DP-GCL Table 1's baseline is the "
            f"untrained encoder), evaluated by a linear probe and 3-NN on its frozen features (probe and neighbours "
            f"from the training images) on all {n_test or '-'} test images. At each epsilon every contrastive method "
            f"trains the same encoder ({s.get('encoder', '-')}, width {s.get('width', '-')}, pooled to "
            f"{s.get('pool', '-')} x {s.get('pool', '-')}, representation {s.get('rep_dim', '-')}, projection "
            f"{s.get('proj_hidden', '-')} -> {s.get('proj_dim', '-')}) for the same {gcl.get('steps', '-')} steps of "
            f"Poisson batches of expected size {s.get('batch_size', '-')}, at delta = 1 / (N ln N) = "
            f"{gcl.get('delta') or 0:.3g}, its noise calibrated by the PLD accountant. The gate's verdict on the run: "
            f"{reference.get('gate')}."]


def classifier_lines(reference: Mapping[str, Any]) -> list[str]:
    """The supervised DP-SGD classifier against Tramer & Boneh's end-to-end CNN."""
    cell = _first(reference, "dpsgd-classifier")
    if cell is None:
        return []
    acc = (cell.get("utility") or {}).get("test_accuracy")
    n = ((cell.get("vs_init") or {}).get(LINEAR) or {}).get("n")
    ours = "-" if acc is None or not n else (
        f"{pct(acc)} [{pct(accuracy_interval(round(acc * n), n)[0])}, {pct(accuracy_interval(round(acc * n), n)[1])}]")
    s = cell.get("settings") or {}
    return ["## Supervised DP-SGD (Tramer & Boneh's end-to-end CNN)", "",
            f"Their CNN with tanh activations trained by DP-SGD (Opacus, Poisson batches of {s.get('batch_size', '-')}, "
            f"{s.get('epochs', '-')} epochs, SGD lr {s.get('lr', '-')} with momentum {s.get('momentum', '-')}, clip "
            f"{s.get('max_grad_norm', '-')}) at epsilon {cell.get('target_epsilon')}: test accuracy {ours} on the "
            f"{n or '-'} test images; Tramer & Boneh 2021 report {TRAMER_BONEH:.1f} at epsilon 3 (delta 1e-5; here "
            f"{cell.get('delta') or 0:.3g}).", ""]


def fedemb_lines(reference: Mapping[str, Any]) -> list[str]:
    """DP-FedEmb beside DP-FedAvg at the same budget: its own metric and the encoder's."""
    rows = [c for c in reference["cells"] if c["label"] in ("dp-fedemb", "dp-fedavg")]
    if not rows:
        return []
    s = (rows[0].get("settings") or {})
    lines = ["## DP-FedEmb beside DP-FedAvg (user level)", "",
             f"Users made from the data: each holds {s.get('examples_per_user', '-')} training images of "
             f"{s.get('classes_per_user', '-')} class(es); {s.get('rounds', '-')} rounds of "
             f"{s.get('clients_per_round', '-')} virtual clients of {s.get('users_per_client', '-')} users, "
             f"{s.get('local_steps', '-')} local steps of {s.get('local_batch_size', '-')}. Recall at FAR is over all "
             "pairs of test images (identities = classes).", "",
             "| cell | recall at FAR | linear probe [95%] | 3-NN [95%] |", "|---|---|---|---|"]
    for c in rows:
        u = c.get("utility") or {}
        lines.append(f"| {c['label']} eps={c['target_epsilon']:g} | {pct(u.get('recall_at_far'))} (FAR "
                     f"{u.get('far', '-')}) | {with_interval(c, LINEAR)} | {with_interval(c, KNN)} |")
    return lines + [""]


def alm_lines(reference: Mapping[str, Any]) -> list[str]:
    """The ALM head's utility loss per mechanism at the cells' epsilons (mean over noise draws, its std error)."""
    cells = [c for c in reference["cells"] if c["label"] == "alm" and c.get("curve")]
    if not cells:
        return []
    lines = ["## The ALM's head on the frozen untrained encoder", "",
             "Utility loss 1 - acc(noised head) / acc(clean head) (ALM Def. 6.1) on the test images, mean +- its "
             "standard error over the noise draws, per mechanism at each epsilon:", "",
             "| epsilon | clean head accuracy | logistic (ALM) | Laplace (snapped) | Gaussian (zCDP) |",
             "|---|---|---|---|---|"]
    for c in cells:
        eps = c["target_epsilon"]
        rows = {r["mechanism"]: r for r in c["curve"] if r.get("epsilon") == eps}
        clean = next(iter(rows.values()), {}).get("accuracy_clean")
        parts = []
        for mech in ("logistic", "laplace", "gaussian-zcdp"):
            r = rows.get(mech)
            se = None if r is None else (r.get("utility_loss_std") or 0.0) / max(1, r.get("draws") or 1) ** 0.5
            parts.append("-" if r is None or not r.get("valid", True) else
                         f"{pct(r['utility_loss_mean'], 2)} +- {pct(se, 2)}")
        lines.append(f"| {eps:g} | {pct(clean)} | " + " | ".join(parts) + " |")
    return lines + [""]


def run_lines(reference: Mapping[str, Any]) -> list[str]:
    """The run's wall time, workers and peak memory."""
    run = reference.get("run") or {}
    wall = run.get("wall_seconds")
    peak = run.get("peak_rss_mb")
    resumed = "" if (run.get("runs") or 1) == 1 else f" over {run['runs']} invocations (a run resumed)"
    lines = ["## The run", "",
             f"Wall time {'-' if wall is None else f'{wall / 60:.1f} minutes'}{resumed} with {run.get('jobs', '-')} "
             f"worker processes ({run.get('cells_timed', 0)} cells timed); peak resident memory of any one "
             f"process {'-' if peak is None else f'{peak / 1024:.2f} GiB'}. Training times are wall clock: their "
             "ratios within the run are what carries over to another machine."]
    if run.get("note"):
        lines += ["", str(run["note"])]
    return lines
