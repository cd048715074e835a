"""The benchmark page's leakage sections, rendered from the leakage and white-box references.

Black-box (:mod:`privaudit.audit.benchmark.leakage`): each non-private target's attacks, every test at each count
of reference models, the TPR at 0.1% and 1% FPR with its exact interval over the members; RMIA's offline test
against offline LiRA at the same OUT references (RMIA's Table 2 counts offline references); the DP cells, gated.
White-box (:func:`whitebox_rows`): each DP cell's trajectory bound over its claim's epsilon.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from privaudit.audit.benchmark.leakage import tpr_interval

#: The field's numbers the tables are set beside (docs: ../shared notes; RMIA Table 2, CIFAR-10, offline AUC).
RMIA_TABLE2_AUC = {1: 0.6864, 2: 0.7013, 4: 0.7102}
#: LiRA's TF-Privacy demo (16 references, CIFAR-10 WRN): AUC online / offline (field notes).
LIRA_DEMO_AUC = {"online": 0.686, "offline": 0.555}
NAMES = {"loss": "LOSS", "shadow": "Shokri shadow models", "lira": "LiRA", "rmia": "RMIA", "encodermi": "EncoderMI",
         "gradient-canary": "gradient canaries", "user-canary": "canary users"}
ORDER = ("loss", "shadow", "encodermi", "lira", "rmia")
TESTS = {"lira": ("online-fixed", "offline-fixed"), "rmia": ("online", "offline")}


def _tpr(row: Mapping[str, Any], fpr: float) -> str:
    tpr, low, high = tpr_interval(row, fpr)
    return f"{100 * tpr:.2f} [{100 * low:.2f}, {100 * high:.2f}]"


def _eps(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _refs(entry: Mapping[str, Any]) -> str:
    c = entry["counts"]
    if "n_reference_models" in c:
        return f"{c['n_reference_models']} ({c['n_reference_models'] - c['n_in_per_candidate']} OUT)"
    return "-"


def _ordered(attacks: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    def key(item: tuple[str, Mapping[str, Any]]) -> tuple[int, int]:
        entry = item[1]
        return ORDER.index(entry["attack"]) if entry["attack"] in ORDER else 9, entry["counts"].get(
            "n_reference_models", 0)
    return sorted(attacks.items(), key=key)


def target_table(cell: Mapping[str, Any]) -> list[str]:
    """One row per attack and test: references (OUT per candidate), AUC, TPR at 0.1% and 1% FPR, the primary
    test's sound one-run epsilon lower bound."""
    lines = ["| attack | references (OUT per candidate) | test | AUC | TPR at 0.1% FPR, % [95%] | TPR at 1% FPR, % "
             "[95%] | epsilon lower bound |", "|---|---|---|---|---|---|---|"]
    for _, entry in _ordered(cell["attacks"]):
        tests = [entry["primary"]] + [t for t in TESTS.get(entry["attack"], ()) if t != entry["primary"]]
        for test in tests:
            row = entry["tests"].get(test)
            if row is None:
                continue
            primary = test == entry["primary"]
            lines.append(f"| {NAMES.get(entry['attack'], entry['attack'])} | {_refs(entry)} | {test}"
                         f"{' (primary)' if primary and len(tests) > 1 else ''} | {row['auc']:.3f} | "
                         f"{_tpr(row, 0.001)} | {_tpr(row, 0.01)} | "
                         f"{_eps(entry['eps_lower_bound']) if primary else ''} |")
    return lines


def offline_comparison(cell: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """RMIA's offline test against LiRA's offline (fixed-variance) test at the same OUT references per candidate:
    the table, and per OUT count the two TPRs at 1% FPR and whether RMIA's is higher."""
    by = {(e["attack"], e["counts"].get("n_reference_models")): e for e in cell["attacks"].values()
          if e["attack"] in ("lira", "rmia")}
    lines = ["| OUT references (of K trained) | RMIA AUC | offline LiRA AUC | RMIA TPR at 1% FPR, % | offline LiRA TPR "
             "at 1% FPR, % | RMIA above | RMIA's Table 2 AUC (CIFAR-10) |", "|---|---|---|---|---|---|---|"]
    rows = []
    for k in sorted({k for (_, k) in by if k}):
        rmia, lira = by.get(("rmia", k)), by.get(("lira", k))
        if not rmia or not lira:
            continue
        r, l_ = rmia["tests"]["offline"], lira["tests"]["offline-fixed"]
        out = k - rmia["counts"]["n_in_per_candidate"]
        t_r, t_l = tpr_interval(r, 0.01)[0], tpr_interval(l_, 0.01)[0]
        rows.append({"out": out, "k": k, "rmia": t_r, "lira": t_l, "above": t_r > t_l})
        anchor = RMIA_TABLE2_AUC.get(out)
        lines.append(f"| {out} (of {k}) | {r['auc']:.3f} | {l_['auc']:.3f} | {_tpr(r, 0.01)} | {_tpr(l_, 0.01)} | "
                     f"{'yes' if t_r > t_l else 'no'} ({100 * (t_r - t_l):+.2f}) | "
                     f"{'-' if anchor is None else f'{anchor:.3f}'} |")
    return lines, rows


def dp_table(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """The DP cells: per attack its AUC, TPR at 1% FPR and sound bound beside the claim, and the gate's verdict."""
    lines = ["| cell | claimed epsilon (accountant) | attack | AUC | TPR at 1% FPR, % [95%] | epsilon lower bound | "
             "gate |", "|---|---|---|---|---|---|---|"]
    for cell in cells:
        verdicts = {c["attack"]: c for c in cell["comparisons"]}
        for label, entry in _ordered(cell["attacks"]):
            row = entry["tests"][entry["primary"]]
            cmp = verdicts.get(label) or {}
            claim = "-" if cmp.get("epsilon") is None else f"{cmp['epsilon']:.3f} ({cmp.get('accountant')})"
            lines.append(f"| {cell['label']} at {cell['target_epsilon']:g} | {claim} | "
                         f"{NAMES.get(entry['attack'], entry['attack'])} ({_refs(entry)}) | {row['auc']:.3f} | "
                         f"{_tpr(row, 0.01)} | {_eps(entry['eps_lower_bound'])} | {cmp.get('verdict', '-')} |")
    return lines


def whitebox_rows(reference: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per white-box cell: its claim (the tightest accountant's epsilon of everything the cell releases), the gate's
    primary comparison (the trajectory bound against the epsilon it is compared with: the claim, or the share of it
    the canaries observe) and the bound's fractions of both."""
    rows = []
    for cell in reference["cells"]:
        for cmp in cell["comparisons"]:
            if cmp["attack"] in ("gradient-canary", "user-canary") and cmp.get("epsilon"):
                claim = cell["epsilon"].get("pld", cmp["epsilon"])
                probes = ((cell["attacks"].get(cmp["attack"]) or {}).get("counts") or {}).get("release_probes")
                rows.append({"label": cell["label"], "target_epsilon": cell["target_epsilon"], **cmp,
                             "steps": cell.get("steps"), "claim": claim, "ratio": cmp["eps_lower_bound"] / claim,
                             "of_compared": cmp["eps_lower_bound"] / cmp["epsilon"], "release_probes": probes})
    return rows


def whitebox_table(reference: Mapping[str, Any]) -> list[str]:
    lines = ["| cell | steps | claimed epsilon (PLD) | the gate compares with | white-box lower bound | bound / claim "
             "| bound / compared | gate |", "|---|---|---|---|---|---|---|---|"]
    for r in whitebox_rows(reference):
        lines.append(f"| {r['label']} at {r['target_epsilon']:g} | {r['steps'] or '-'} | {r['claim']:.3f} | "
                     f"{r['epsilon']:.3f} ({r['accountant']}) | {r['eps_lower_bound']:.3f} | {r['ratio']:.3f} | "
                     f"{r['of_compared']:.3f} | {r['verdict']} |")
    return lines


def _utility(cell: Mapping[str, Any]) -> str:
    u = cell["utility"]
    if u.get("test_accuracy") is not None:
        train = u.get("train_accuracy", float("nan"))
        return f"test accuracy {100 * u['test_accuracy']:.1f}% (train {100 * train:.1f}%)"
    return f"linear probe {100 * u.get('linear_probe_accuracy', float('nan')):.1f}%, 3-NN " \
           f"{100 * u.get('knn_accuracy', float('nan')):.1f}%"


def _offline_sentence(rows: Sequence[Mapping[str, Any]], fitted: Sequence[float] = ()) -> str:
    few = [r for r in rows if r["out"] in (1, 2, 4)]
    if not few:
        return ""
    above = [r for r in few if r["above"]]
    says = ", ".join(f"{r['out']}: {100 * r['rmia']:.2f} vs {100 * r['lira']:.2f}" for r in few)
    if len(above) == len(few):
        return (f"RMIA's TPR at 1% FPR is above offline LiRA's at 1, 2 and 4 OUT references ({says}; percent): the "
                "shape of RMIA's Table 2.")
    why = ""
    if any(r["out"] == 1 and not r["above"] for r in few):
        why = (" At 1 OUT reference (2 trained, a complementary pair) no reference is left to fit RMIA's offline slope "
               "a on (leave-one-out), so it is the default 0.3 fixed in advance"
               + (f", where the attacks with more references fitted {min(fitted):g} to {max(fitted):g} on theirs"
                  if fitted else "") + ": the approximation Pr(x) = ((1 + a) Pr_OUT(x) + 1 - a) / 2 then weighs the "
               "one reference less than the data would, while offline LiRA's pooled-variance test reads the whole "
               "offset of the target's logit from it.")
    return (f"RMIA's TPR at 1% FPR is above offline LiRA's at {len(above)} of {len(few)} counts of OUT references "
            f"({says}; percent): the published shape holds only where it says yes.{why}")


def _fitted_a(cell: Mapping[str, Any]) -> list[float]:
    """The offline slopes RMIA fitted on its references in this cell (where it could)."""
    return [e["a"] for e in cell["attacks"].values() if e["attack"] == "rmia" and e.get("a_fitted")]


def leakage_lines(leakage: Mapping[str, Any]) -> list[str]:
    """The black-box section: the two non-private targets, the offline comparison, the DP cells."""
    cells = leakage["cells"]
    open_ = [c for c in cells if c["target_epsilon"] is None and c["attacks"]]
    private = [c for c in cells if c["target_epsilon"] is not None and c["attacks"]]
    n = open_[0]["attacks"][next(iter(open_[0]["attacks"]))]["tests"] if open_ else {}
    row = next(iter(n.values())) if n else {"n_members": 0, "n_nonmembers": 0}
    lines = ["## Leakage at the benchmark's scale", "",
             f"`suites/benchmark-fashion-mnist-leakage.toml` (commit `{leakage.get('commit')}`, gate "
             f"{leakage.get('gate')}): the benchmark's CNN trained on a random half of an audit pool of Fashion-MNIST "
             f"training images ({row['n_members']:,} members, {row['n_nonmembers']:,} non-members), the attacker's "
             "reference data disjoint from both. Each TPR's interval is exact over the members (the threshold is set "
             "on the non-members alone); an epsilon lower bound is the one-run bound on the attack's primary scores "
             "(sound, 95%). Every attack's scores are in "
             "`reports/reference/benchmark-fashion-mnist-leakage/scores/` (one `.npz` per model: `membership`, and "
             "`<attack>/<test>` for each test below, float32: every AUC and TPR here recomputes from them exactly), "
             "and a run writes them in float64 under `cells/*/attacks/`.", ""]
    for cell in open_:
        kind = "classifier" if cell["utility"].get("test_accuracy") is not None else "encoder"
        lines += [f"### The non-private {kind} ({cell['label']}: {_utility(cell)})", "", *target_table(cell), ""]
        table, rows = offline_comparison(cell)
        if rows:
            lines += [f"RMIA against offline LiRA on the {kind}, at the same OUT references per candidate (the first K "
                      "of the paired references):", "", *table, "", _offline_sentence(rows, _fitted_a(cell)), "",
                      f"The field's CIFAR-10 numbers beside ours: RMIA's Table 2 (offline AUC, last column) and LiRA's "
                      f"TF-Privacy demo with 16 references (AUC {LIRA_DEMO_AUC['online']} online, "
                      f"{LIRA_DEMO_AUC['offline']} offline); a wide network on CIFAR-10 overfits far more than this "
                      "CNN on Fashion-MNIST, so the shape (which attack leads, how it grows with the references) is "
                      "what compares, not the level.", ""]
        if "encodermi" in {e["attack"] for e in cell["attacks"].values()}:
            lines += ["EncoderMI (Liu et al. 2021) reports accuracy, precision and recall of its attack classifiers "
                      "on encoders pre-trained to overfit (hundreds of epochs on a few thousand images), not an AUC: "
                      "the row above is its AUC and TPRs on an encoder trained the benchmark's way.", ""]
    if private:
        lines += ["### The DP cells, gated", "", "Each bound beside the claim's epsilon by the tightest accountant; "
                  "the gate fails a cell whose bound exceeds it (not comparable: an attack on examples beside a claim "
                  "on users, DP-FedEmb's and DP-FedAvg's).", "", *dp_table(private)]
    return lines


def whitebox_lines(whitebox: Mapping[str, Any]) -> list[str]:
    """The white-box section: every DP cell of the benchmark audited at its own scale, its bound over the claim."""
    rows = whitebox_rows(whitebox)
    lines = ["## White-box audits at the benchmark's scale", "",
             f"`suites/benchmark-fashion-mnist-whitebox.toml` (commit `{whitebox.get('commit')}`, gate "
             f"{whitebox.get('gate')}): the benchmark's DP cells with its settings and data, each audited in its own "
             "code path (gradient canaries in the DP engine's step, canary users in the federated aggregation) with "
             "a trajectory probe at every step; the bound is the white-box trajectory bound (Nasr et al. 2023) at "
             "95%, its claim the tightest accountant's epsilon.", "", *whitebox_table(whitebox), ""]
    if rows:
        low = min(rows, key=lambda r: r["ratio"])
        lines += [f"The bound reaches {min(r['ratio'] for r in rows):.3f} to {max(r['ratio'] for r in rows):.3f} of "
                  f"the claim over {len(rows)} cells (lowest: {low['label']} at {low['target_epsilon']:g}); "
                  f"{sum(r['ratio'] >= 0.8 for r in rows)} of {len(rows)} reach 0.8."]
        below = [r for r in rows if r["ratio"] < 0.8]
        short = [r for r in below if r["epsilon"] < 0.8 * r["claim"]]
        if short:
            lines[-1] += (" Below 0.8 where the gate compares with a share of the claim: " + ", ".join(
                f"{r['label']} at {r['target_epsilon']:g} (the share {r['epsilon'] / r['claim']:.3f} of the claim, "
                f"the bound {r['of_compared']:.3f} of the share)" for r in short) + ". DPCL's claim composes a "
                "release the gradient canaries do not observe (it noises the similarity matrix beside the gradient, "
                "its accountant both into one Gaussian); the bound measures the gradient's share alone.")
        weak = [r for r in below if r not in short]
        if weak:
            lines[-1] += " Below 0.8 against its full claim (the bound's own shortfall): " + ", ".join(
                f"{r['label']} at {r['target_epsilon']:g} ({r['ratio']:.3f})" for r in weak) + "."
        lines.append("")
    lines += update_lines(whitebox.get("updates") or [])
    missing = [r.split(":")[0].removeprefix("cell ") for r in whitebox.get("gate_reasons") or [] if "no result" in r]
    if missing:
        lines += [f"Not run ({len(missing)} cells, so the gate fails: it judges the whole suite): "
                  f"{', '.join(f'`{m}`' for m in missing)}.", ""]
    if whitebox.get("similarity_reach"):
        lines += reach_lines(whitebox["similarity_reach"], {(r["label"], r["target_epsilon"]): r for r in rows})
    return lines


def update_lines(updates: Sequence[Mapping[str, Any]]) -> list[str]:
    """The cells re-measured after the full run (audit/benchmark/leakage.py: merge_cells), each with its commit."""
    lines = []
    for u in updates:
        gates = ", ".join(f"`{i}` {g}" for i, g in sorted(u["cell_gates"].items()))
        reasons = u.get("gate_reasons") or []
        lines.append(f"Re-measured at commit `{str(u['commit'])[:7]}` by a run of those cells alone (`--only`, "
                     f"`scripts/render_benchmark.py --whitebox-update`): {gates}; that run's gate reasons for them: "
                     + ("; ".join(reasons) if reasons else "none") + ".")
    return lines + ([""] if lines else [])


def attainable(cell: Mapping[str, Any]) -> float:
    """The epsilon a canary can attain in a DPCL cell: at the larger of the init's and the trained model's reach (the
    run passes from one to the other)."""
    return max(cell["init"]["attainable_epsilon"], cell["trained"]["attainable_epsilon"])


def reach_lines(reach: Mapping[str, Any], bounds: Mapping[tuple[str, float], Mapping[str, Any]]) -> list[str]:
    """DPCL's similarity reach (audit/benchmark/similarity_reach.py): the epsilon any canary can attain on the cell's
    data, beside the claim and the white-box bound, so the bound's shortfall is split into the data's and ours."""
    lines = ["### DPCL: what a canary can attain on this data", "",
             "How far one replaced example can move DPCL's similarity matrix in a batch, as a fraction of Thm. 1's "
             "sensitivity (the reach: at most sqrt((lambda + 1/2) / (2|B| - 1)), lambda the top eigenvalue of the "
             "other rows' Gram matrix, attained to sqrt(lambda / (2|B| - 1)) by a witness), the largest over "
             f"{reach['cells'][0]['batches'] if reach.get('cells') else 0} batches of the cell's training images "
             "(`scripts/similarity_reach.py`). The similarity release is then a Gaussian of noise multiplier z_S / "
             "reach for any canary, crafted or not: the epsilon attainable is the claim's event at that multiplier.",
             "", "| cell | reach at the init | reach after training | claim (PLD) | attainable (PLD, the larger "
             "reach's) | attainable / claim | gradient share | white-box bound / attainable |",
             "|---|---|---|---|---|---|---|---|"]
    for c in reach.get("cells", []):
        label, eps = c["id"].split("/")[1], c["target_epsilon"]
        bound = bounds.get((label, eps), {}).get("eps_lower_bound")
        att = attainable(c)
        lines.append(f"| {label} at {eps:g} | {c['init']['ceiling_max']:.3f} | {c['trained']['ceiling_max']:.3f} | "
                     f"{c['claim']:.3f} | {att:.3f} | {att / c['claim']:.3f} | {c['gradient_share']:.3f} | "
                     f"{'-' if bound is None else f'{bound / att:.3f}'} |")
    fractions = [attainable(c) / c["claim"] for c in reach.get("cells", [])]
    if fractions:
        lines += ["", f"A canary can attain {min(fractions):.3f} to {max(fractions):.3f} of the claim on this data "
                  "(the rest of the claim is out of any canary's reach here: the similarity noise is calibrated to "
                  "batches of collinear rows). " + _instrument_sentence(reach, bounds)]
    return lines + [""]


def _instrument_sentence(reach: Mapping[str, Any], bounds: Mapping[tuple[str, float], Mapping[str, Any]]) -> str:
    """What the DPCL cells' white-box bound observes: the whole step (release probes; compared with the whole
    claim) or the gradient release alone (compared with its share)."""
    rows = [bounds.get((c["id"].split("/")[1], c["target_epsilon"])) for c in reach.get("cells", [])]
    whole = [r for r in rows if r is not None and r.get("epsilon") is not None and r["epsilon"] == r.get("claim")]
    if not whole or len(whole) < len(rows):
        return ("The bound's shortfall below the attainable epsilon is the instrument's: the gradient canaries observe "
                "the gradient release, not the noised similarity matrix released beside it.")
    ratios, probes = [r["ratio"] for r in whole], sorted({r.get("release_probes") for r in whole}, key=str)
    return (f"The white-box bound observes both releases: DPCL's release probes (`attacks/canaries/release_probes.py`) "
            f"set +-Delta_S / 2 on {' / '.join(map(str, probes))} entries of the noised similarity matrix at every "
            f"step, withdrawn before the "
            f"loss, beside the gradient canaries' probes, and the whole step's bound reaches {min(ratios):.3f} to "
            f"{max(ratios):.3f} of the claim. It can exceed what a replaced example attains (bound / attainable above "
            f"1): the probes move one entry by Thm. 1's whole sensitivity, as the white-box adversary of Nasr et al. "
            f"2023 sets a release's input anywhere within its sensitivity, so they test the noise the claim's "
            f"accountant composes; the attainable column is what an example of this data can show.")
