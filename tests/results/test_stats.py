#!/usr/bin/python3
"""CTest results.stats: the paired analysis every lift in results/ uses (issue 42), checked against closed forms and
hand-made rows: Tango's score interval, McNemar's exact test, each fault row's own sham twin, strata agreement and the
headline wording a no-op match must carry."""
import pathlib
import sys
import unittest

import pandas as pd

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "experiments"))
from sfreport.arms import agree, lift_table, null_match, paired, pooled, twin_key, with_null  # noqa: E402
from sfreport.stats import mcnemar_exact, tango_paired  # noqa: E402

Z2 = 1.959963984540054 ** 2


class Intervals(unittest.TestCase):
    def test_no_discordant_pair_has_the_closed_form_width(self):
        # b = c = 0: the score statistic is -sqrt(n d / (1 - d)), so the limits are +-z^2 / (n + z^2)
        for n in (5, 50, 400):
            d, lo, hi = tango_paired(n // 2, 0, 0, n - n // 2)
            self.assertEqual(d, 0.0)
            self.assertAlmostEqual(hi, Z2 / (n + Z2), places=9)
            self.assertAlmostEqual(lo, -Z2 / (n + Z2), places=9)

    def test_large_sample_is_close_to_wald(self):
        # Agresti's presidential-approval table: (b - c) / n = 0.04, Wald 0.04 +- 0.0187
        d, lo, hi = tango_paired(794, 150, 86, 570)
        self.assertAlmostEqual(d, 0.04)
        self.assertAlmostEqual(lo, 0.0213, delta=0.002)
        self.assertAlmostEqual(hi, 0.0587, delta=0.002)

    def test_limits_stay_in_range_and_hold_the_estimate(self):
        for cells in [(0, 5, 0, 0), (0, 0, 5, 0), (3, 2, 1, 4), (0, 0, 0, 1), (10, 0, 10, 0)]:
            d, lo, hi = tango_paired(*cells)
            self.assertTrue(-1 <= lo <= d <= hi <= 1, (cells, lo, d, hi))
        self.assertEqual(tango_paired(0, 5, 0, 0)[2], 1.0)
        self.assertEqual(tango_paired(0, 0, 5, 0)[1], -1.0)

    def test_mcnemar_exact_is_the_binomial_test_of_the_discordant_pairs(self):
        self.assertEqual(mcnemar_exact(0, 0), 1.0)
        self.assertAlmostEqual(mcnemar_exact(5, 0), 2 * 0.5 ** 5)
        self.assertAlmostEqual(mcnemar_exact(0, 5), 2 * 0.5 ** 5)
        self.assertAlmostEqual(mcnemar_exact(15, 5), 0.041389465, places=8)


def rows(spec):
    """Rows of a sweep: (arm, row id, scenario, delay, hit)."""
    return pd.DataFrame([{"arm": a, "row": r, "scenario": s, "delay_ms": dl, "top1": h} for a, r, s, dl, h in spec])


class Twins(unittest.TestCase):
    def test_the_twin_key_drops_the_arm_and_the_delays(self):
        self.assertEqual(twin_key("delay_ms-60__ranks-8__seed-1"), ("ranks-8__seed-1", None))
        self.assertEqual(twin_key("sham-for_delay_ms-60.0__delay_ms-0__ranks-8__seed-1"), ("ranks-8__seed-1", "60"))
        self.assertEqual(twin_key("sim-sham-delay_ms-0__ranks-8__seed-1"), ("sim-ranks-8__seed-1", None))
        self.assertNotEqual(twin_key("sim-delay_ms-0__seed-1")[0], twin_key("delay_ms-0__seed-1")[0])

    def test_each_delay_is_paired_with_its_own_sham(self):
        df = rows([("fault", "delay_ms-60__seed-1", "data_tail", 60, 1), ("fault", "delay_ms-120__seed-1", "data_tail", 120, 1),
                   ("sham", "sham-for_delay_ms-60__delay_ms-0__seed-1", "data_tail", 0, 1),
                   ("sham", "sham-for_delay_ms-120__delay_ms-0__seed-1", "data_tail", 0, 0)])
        f, s = df[df.arm == "fault"], df[df.arm == "sham"]
        q = paired(f, s, "top1")
        self.assertEqual((q["pairs"], q["a"], q["b"], q["c"], q["d"], q["shared"]), (2, 1, 1, 0, 0, 1))

    def test_a_shared_sham_is_counted_as_shared(self):
        df = rows([("fault", "delay_ms-60__seed-1", "data_tail", 60, 0), ("fault", "delay_ms-120__seed-1", "data_tail", 120, 1),
                   ("fault", "delay_ms-60__seed-2", "data_tail", 60, 1), ("sham", "sham-delay_ms-0__seed-1", "data_tail", 0, 1)])
        q = paired(df[df.arm == "fault"], df[df.arm == "sham"], "top1")
        self.assertEqual((q["pairs"], q["a"], q["c"], q["shared"]), (2, 1, 1, 2))  # seed 2 has no twin


class Headlines(unittest.TestCase):
    def sweep(self, fault_hits, sham_hits):
        """Two scenarios, 5 seeds each, one sham per seed and scenario."""
        spec = []
        for sc, fh, sh in zip(["a", "b"], fault_hits, sham_hits):
            for seed in range(5):
                spec.append(("fault", f"scenario-{sc}__seed-{seed}", sc, 120, int(seed < fh)))
                spec.append(("sham", f"sham-delay_ms-0__scenario-{sc}__seed-{seed}", sc, 0, int(seed < sh)))
        return rows(spec)

    def test_a_count_the_sham_matches_says_so(self):
        text = with_null(pooled(self.sweep([5, 0], [5, 0]), "top1"), "top-1")
        self.assertTrue(text.startswith("top-1 5/10, sham 5/10: no lift, the sham scores the same (paired lift"), text)

    def test_strata_that_disagree_get_no_pooled_lift(self):
        p = pooled(self.sweep([5, 0], [0, 0]), "top1")
        self.assertEqual(sorted(p["strata"]), [0.0, 1.0])
        self.assertFalse(agree(p["strata"]))
        text = with_null(p, "top-1")
        self.assertTrue(text.startswith("top-1 5/10, sham 0/10: not pooled, the lifts vary across strata: of 2 strata the "
                                        "fault rows score more in 1, neither arm hits in 1, the pairs that differ: 5 for the fault "
                                        "rows, 0 for the sham, none can show a lift alone: at 5 pairs a stratum the smallest "
                                        "McNemar p is 0.062 (paired lifts +0.00 to +1.00"), text)
        # A stratum where the sham hits as often is told apart from one where neither hits; 6 pairs can show a lift.
        spec = []
        for sc, fh, sh in [("a", 6, 6), ("b", 6, 0)]:
            for seed in range(6):
                spec.append(("fault", f"scenario-{sc}__seed-{seed}", sc, 120, int(seed < fh)))
                spec.append(("sham", f"sham-delay_ms-0__scenario-{sc}__seed-{seed}", sc, 0, int(seed < sh)))
        text = with_null(pooled(rows(spec), "top1"), "top-1")
        self.assertIn("of 2 strata the fault rows score more in 1, the sham as much in 1, the pairs that differ: 6 for the "
                      "fault rows, 0 for the sham, a lift shown in 1 (", text)
        self.assertNotIn("paired lift ", text)

    def test_a_lift_both_tests_do_not_show_is_too_few_pairs(self):
        # 4 pairs, all fault-only: Tango's interval lies above 0, McNemar's exact p = 0.125: not shown.
        df = rows([("fault", f"seed-{i}", "a", 120, 1) for i in range(4)] + [("sham", f"sham-delay_ms-0__seed-{i}", "a", 0, 0) for i in range(4)])
        p = pooled(df, "top1")
        self.assertGreater(p["lo"], 0)
        self.assertGreater(p["p"], 0.05)
        self.assertTrue(with_null(p, "top-1").startswith("top-1 4/4, sham 0/4: too few pairs to show a lift ("))
        # 6 pairs: p = 0.03 and the interval above 0: shown, no hedge.
        df6 = rows([("fault", f"seed-{i}", "a", 120, 1) for i in range(6)] + [("sham", f"sham-delay_ms-0__seed-{i}", "a", 0, 0) for i in range(6)])
        self.assertTrue(with_null(pooled(df6, "top1"), "top-1").startswith("top-1 6/6, sham 0/6 (paired lift +1.00"))

    def test_the_sham_column_counts_a_strata_own_twins_once(self):
        # Per-delay shams: the 60 ms stratum's sham column is its own twin, not every delay's shams.
        df = rows([("fault", "delay_ms-60__seed-1", "a", 60, 1), ("fault", "delay_ms-120__seed-1", "a", 120, 1),
                   ("sham", "sham-for_delay_ms-60__delay_ms-0__seed-1", "a", 0, 1),
                   ("sham", "sham-for_delay_ms-120__delay_ms-0__seed-1", "a", 0, 0)])
        t = lift_table(df, ["delay_ms"], measures=["top-1"])
        self.assertEqual(list(t["sham"]), ["1/1", "0/1"])
        f = df[df.arm == "fault"]
        self.assertEqual(list(null_match(df[df.arm == "sham"], f[f.delay_ms == 120], ["delay_ms"]).row),
                         ["sham-for_delay_ms-120__delay_ms-0__seed-1"])
        # A sham two delays share is one twin.
        shared = rows([("fault", "delay_ms-60__seed-1", "a", 60, 1), ("fault", "delay_ms-120__seed-1", "a", 120, 1),
                       ("sham", "sham-delay_ms-0__seed-1", "a", 0, 1)])
        q = paired(shared[shared.arm == "fault"], shared[shared.arm == "sham"], "top1")
        self.assertEqual((q["pairs"], q["twins"], q["twin_hits"], q["shared"]), (2, 1, 1, 2))

    def test_strata_that_agree_get_the_pooled_paired_lift(self):
        p = pooled(self.sweep([5, 5], [0, 0]), "top1")
        self.assertTrue(agree(p["strata"]))
        self.assertRegex(with_null(p, "top-1"), r"^top-1 10/10, sham 0/10 \(paired lift \+1\.00 \[\+0\.\d\d, \+1\.00\], McNemar p 0\.002")

    def test_agreement_rule(self):
        self.assertTrue(agree([0.1, 0.4]))
        self.assertFalse(agree([0.1, 0.41]))
        self.assertFalse(agree([-0.1, 0.1]))
        self.assertTrue(agree([]))


if __name__ == "__main__":
    unittest.main()
