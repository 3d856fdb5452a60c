"""§6.1 algorithmic validation: the fixtures' recovery rates and the bounds beside the paper's."""

import pathlib

import matplotlib.pyplot as plt
import pandas as pd

from .common import Report, header, md_table


def report_fixtures(d: pathlib.Path, df: pd.DataFrame) -> Report:
    text, _ = header(d, "§6.1 algorithmic validation")
    t = df[["metric", "ours", "paper", "note"]].copy()
    t["ours"] = t["ours"].map(lambda x: f"{x:.3g}")
    text += md_table(t.fillna(""))
    sw = df[df.metric.str.startswith("sync_wait:")]
    de = df[df.metric.str.startswith("direct_exposure:")]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels = [m.split(":")[1] for m in sw.metric]
    ax.bar([x - 0.2 for x in range(len(sw))], sw.ours, 0.4, label="sync-wait fixture (n=120)")
    ax.bar([x + 0.2 for x in range(len(de))], de.ours, 0.4, label="direct-exposure fixture (n=240)")
    ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
    ax.set_ylabel("top-1 recovery")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "fixtures.png", dpi=120)
    props = df[df.metric.str.startswith("property:")]
    headline = (f"telescoping error {df.set_index('metric').loc['telescoping_max_abs_error_s', 'ours']:.2g} s, "
                f"{int(df.set_index('metric').loc['prop1_violations', 'ours'] + df.set_index('metric').loc['prop2_violations', 'ours'])} bound violations, "
                f"sync-wait fixture frontier {df.set_index('metric').loc['sync_wait:frontier', 'ours']:.0%} vs max "
                f"{df.set_index('metric').loc['sync_wait:per_stage_max', 'ours']:.0%} / avg {df.set_index('metric').loc['sync_wait:per_stage_avg', 'ours']:.0%} "
                "(a constructed case whose answer is built in: a check of the code, not a finding), "
                f"{int(props.ours.sum())}/{len(props)} properties hold")
    m = df.set_index("metric")["ours"]
    differ = (f"Stability ratio reaches {m['stability_max_observed_over_bound']:.4g} where the paper reports at most 0.9998: the "
              "generator also puts every measurement error at +eps or -eps together, the construction that makes "
              f"Proposition 3's bound tight; reaching a bound is not a violation ({int(m['prop1_violations'] + m['prop2_violations'])} "
              "violations).")
    return text, headline, "fixtures.png", "paper: 8.88e-16, 0 violations, 100% vs 0%", differ
