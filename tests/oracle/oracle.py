#!/usr/bin/python3
"""A reference labeler for StageFrontier windows, written from the paper's text and
docs/labeler.md alone (issue 28).

It reads sf.stages/1 JSON Lines itself and computes, from the duration matrix, everything the
labels need: prefixes, frontier advances, shares, clipped static gains, lags, leaders and their
switches, the baselines the labels read, the event summary and the telemetry gates; then every
label of Table 12. Nothing is imported from sf-testbed and nothing is read from its packets.
tests/oracle/check.py compares the two.

Where a decision compares two floating-point numbers closer than the rounding of either side
could move (a sum formed in another order, a share at its threshold), the window is marked
*fragile* with the decision named: two correct implementations may then disagree.
"""
import json
import math

import numpy as np

RESIDUAL = "step.other_cpu_wall"
# Table 12, in table order.
LABELS = ["frontier_accounting", "likely_sync_wait", "sync_wait_dependent", "direct_exposure",
          "forward_device_supported", "forward_spillover_suspected", "forward_host_overhead_suspected",
          "forward_event_scope_limited", "co_critical", "gradient_accumulation_ambiguous", "role_aware_needed",
          "telemetry_limited"]
# Labels that claim a stage-level diagnosis (suppressed by the telemetry and role gates).
STRONG = {"likely_sync_wait", "sync_wait_dependent", "direct_exposure", "forward_device_supported",
          "forward_spillover_suspected", "forward_host_overhead_suspected"}
# The stages every accumulation microstep runs (the recorder's names; docs/labeler.md).
PER_MICROSTEP = ("data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall")

# Table 13's gates, the values docs/labeler.md gives where the paper names a threshold without
# one, and the options (off: the paper's reading).
DEFAULTS = {
    "max_closure_residual_share": 0.05, "max_overlap_error_share": 0.01, "max_missing_ranks": 0,
    "min_event_ready_ratio": 0.8, "min_event_samples": 5, "gamma_a": 0.4, "gamma_g": 0.1,
    "eta_a": 0.05, "eta_g": 0.05, "tau_c": 0.80, "wait_model": [],
    "eta_q": 0.01, "gamma_elig": 0.05, "gamma_switch": 0.5, "share_floor_s": 1e-6,
    "gamma_event": 0.25, "event_low_ratio": 0.5, "gain_baseline": "cohort_median", "reference_s": [],
    "event_scope_limited": False, "forward_group": "model.fwd_loss_cpu_wall",
    "tie_abs_s": 1e-9, "tie_rel": 1e-12,
    "ambiguity_residual_leaders": False, "co_critical_needs_two_stages": False, "require_wall": True,
}


def group_of(name):
    """Stages sharing a name before '#' form one reporting group (accumulation microsteps)."""
    return name.split("#", 1)[0]


class Window:
    """One window of an sf.stages/1 file: durations d[t, r, s] (NaN where a record is absent)."""

    def __init__(self, header):
        self.explicit = list(header["stages"])
        self.world = int(header["world_size"])
        self.roles = header.get("roles")
        self.m = int(header.get("accumulation", 1))
        self.declared = header.get("window")
        tel = header.get("telemetry", {})
        self.gather_ok = bool(tel.get("gather_ok", True))
        self.reasons = list(tel.get("reasons", []))
        self.dropped = int(tel.get("dropped_records", 0))
        self.records = []

    def finish(self):
        recs = self.records
        self.has_wall = bool(recs) and "wall" in recs[0]
        self.stages = self.explicit + ([RESIDUAL] if self.has_wall else [])
        steps = [int(r["step"]) for r in recs]
        if self.declared:
            self.first = int(self.declared["first_step"])
            self.N = int(self.declared["steps"])
        else:
            self.first = min(steps)
            self.N = max(steps) - self.first + 1
        K, S, R, N = len(self.explicit), len(self.stages), self.world, self.N
        self.d = np.full((N, R, S), np.nan)
        self.wall = np.full((N, R), np.nan)
        self.overlap = np.zeros((N, R))
        self.present = np.zeros((N, R), dtype=bool)
        self.event = np.zeros((N, R), dtype=np.int8)  # 0 unsampled, 1 ready, 2 missing
        self.event_s = np.full((N, R), np.nan)
        for r in recs:
            t, k = int(r["step"]) - self.first, int(r["rank"])
            d = [float(x) for x in r["d"]]
            self.present[t, k] = True
            self.d[t, k, :K] = d
            if self.has_wall:
                # Appendix A: e = w - sum of the explicit stages; residual max(0, e), overlap max(0, -e).
                e = float(r["wall"]) - sum(d)
                self.d[t, k, K] = max(0.0, e)
                self.overlap[t, k] = max(0.0, -e)
                self.wall[t, k] = float(r["wall"])
            side = r.get("side", {})
            state = side.get("fwd_event", "unsampled")
            if state == "ready":
                self.event[t, k] = 1
                # The recorder keeps event times as 32-bit floats (frontier.h, side evidence).
                self.event_s[t, k] = float(np.float32(side["fwd_event_s"]))
            elif state == "missing":
                self.event[t, k] = 2
        self.groups = []
        for n in self.stages:
            if group_of(n) not in self.groups:
                self.groups.append(group_of(n))
        self.gidx = [self.groups.index(group_of(n)) for n in self.stages]
        return self


def read_jsonl(path):
    """Every window of a JSON Lines stage file (a header line opens a window)."""
    windows = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            obj = json.loads(line)
            if "schema" in obj:
                if windows:
                    windows[-1].finish()
                windows.append(Window(obj))
            else:
                windows[-1].records.append(obj)
    if windows:
        windows[-1].finish()
    return windows


class Decisions:
    """Comparisons with a record of the ones too close to call across summation orders."""

    REL = 1e-9

    def __init__(self):
        self.fragile = []

    def _near(self, a, b, what):
        # Exactly equal sides are formed the same way on both sides (the same values summed in the
        # same order): not fragile. Sides a few roundings apart are.
        if 0 < abs(a - b) <= self.REL * max(abs(a), abs(b)):
            self.fragile.append(what)

    def ge(self, a, b, what):
        self._near(a, b, what)
        return a >= b

    def gt(self, a, b, what):
        self._near(a, b, what)
        return a > b


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def accumulation_problem(stages, m):
    """Table 12, gradient_accumulation_ambiguous: microsteps collapsed or mixed ('' when neither)."""
    if m <= 1:
        return ""
    index = []
    for n in stages:
        if "#" not in n:
            index.append(-1)
            continue
        tail = n.split("#", 1)[1]
        if not tail.isdigit() or int(tail) >= m:
            return f"{n}: microstep index not in 0..{m - 1}"
        index.append(int(tail))
    if all(i < 0 for i in index):
        return "collapsed: no stage carries a microstep index"
    seen = {}
    for n, i in zip(stages, index):
        if i >= 0:
            seen.setdefault(group_of(n), []).append(i)
    for g, idx in seen.items():
        if sorted(idx) != list(range(m)):
            return f"{g}: microsteps {sorted(idx)} are not each of 0..{m - 1} once"
    first = index.index(next(i for i in index if i >= 0))
    last = len(index) - 1 - index[::-1].index(next(i for i in index[::-1] if i >= 0))
    for s in range(first, last + 1):
        if index[s] < 0:
            return f"{stages[s]} inside the microstep loop without an index"
    for n, i in zip(stages, index):
        if i < 0 and n in PER_MICROSTEP:
            return f"{n} runs every microstep but carries no index"
    return ""


def label(w, cfg_in=None):
    """The labels of window w under configuration cfg_in (keys as the config file's)."""
    cfg = dict(DEFAULTS)
    cfg.update(cfg_in or {})
    dec = Decisions()
    N, R, S = w.d.shape
    G = len(w.groups)
    gidx = w.gidx
    fwd = w.groups.index(cfg["forward_group"]) if cfg["forward_group"] in w.groups else -1

    # ---- per step: frontier, leaders, lag, baselines, gains (paper §3-4) ----
    adv = [0.0] * G
    gain_num = [0.0] * G
    lag_inc = [0.0] * G
    pmax = [0.0] * G
    spread = [0.0] * G
    credit = [dict() for _ in range(G)]
    conf_n = [0] * S
    switches = [0] * S
    last_conf = [None] * S
    exposed_steps = []
    cf_adv, cf_denom = [0.0] * G, 0.0
    scored = [t for t in range(N) if w.present[t].any()]
    rank_median = None
    if cfg["gain_baseline"] == "rank_median":
        rank_median = np.zeros((R, S))
        for r in range(R):
            rows = [t for t in range(N) if w.present[t, r]]
            for s in range(S):
                if rows:
                    rank_median[r, s] = median([w.d[t, r, s] for t in rows])
    ref = cfg["reference_s"]
    if cfg["gain_baseline"] == "reference":
        ref_row = np.array([ref[s] if len(ref) == S else ref[gidx[s]] for s in range(S)], dtype=float)

    def baselines(cohort, ranks):
        """b~ for every present rank (rows) and stage (columns) of one step (Appendix B)."""
        if cfg["gain_baseline"] == "cohort_median":
            return np.broadcast_to(cohort, (len(ranks), S))
        if cfg["gain_baseline"] == "rank_median":
            return rank_median[ranks, :]
        return np.broadcast_to(ref_row, (len(ranks), S))

    def col_medians(x):
        """Median of each column (even counts: the mean of the two middle values)."""
        v = np.sort(x, axis=0)
        n = v.shape[0]
        return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])

    # Counterfactual of the top group (C_R): the top group by summed advance, known first.
    s1_pre = -1
    if cfg["ambiguity_residual_leaders"]:
        pre = [0.0] * G
        for t in scored:
            ranks = np.flatnonzero(w.present[t])
            F = np.cumsum(w.d[t, ranks, :], axis=1).max(axis=0)
            prev = 0.0
            for s in range(S):
                pre[gidx[s]] += F[s] - prev
                prev = F[s]
        order = sorted(range(G), key=lambda g: (-pre[g], g))
        s1_pre = order[0] if pre[order[0]] > 0 else -1

    for t in scored:
        ranks = np.flatnonzero(w.present[t])
        n = len(ranks)
        d = w.d[t, ranks, :]
        P = np.cumsum(d, axis=1)
        F = P.max(axis=0)
        exposed = F[S - 1]
        exposed_steps.append(exposed)
        cohort = col_medians(d)
        lag = F - col_medians(P)
        mx = d.max(axis=0)
        # Leaders: prefixes within the tie tolerance attain F[t, s]; the gap is to the best of the rest.
        tol = np.maximum(cfg["tie_abs_s"], cfg["tie_rel"] * F)
        att = P >= F - tol
        count = att.sum(axis=0)
        rest = np.where(att, -np.inf, P).max(axis=0)
        prev_f, prev_lag = 0.0, 0.0
        for s in range(S):
            g = gidx[s]
            a = F[s] - prev_f
            prev_f = F[s]
            adv[g] += a
            lag_inc[g] += lag[s] - prev_lag
            prev_lag = lag[s]
            pmax[g] += mx[s]
            spread[g] += mx[s] - cohort[s]
            if a <= 0:
                continue
            who = ranks[att[:, s]]
            for r in who:
                credit[g][int(r)] = credit[g].get(int(r), 0.0) + a / len(who)
            if len(who) == 1:
                gap = F[s] - rest[s] if count[s] == 1 and n > 1 else 0.0
                confident = exposed > 0 and dec.ge(a, cfg["gamma_elig"] * exposed, "confident advance") and \
                    dec.ge(gap, cfg["eta_q"] * exposed, "confident gap")
                if confident:
                    conf_n[s] += 1
                    if last_conf[s] is not None and last_conf[s] != int(who[0]):
                        switches[s] += 1
                    last_conf[s] = int(who[0])
        # Clipped static gain (eq. 4): group g's stages at min(d, b~), F' recomputed.
        B = baselines(cohort, ranks)
        cut = d - np.minimum(d, B)
        total = P[:, S - 1]
        for g in range(G):
            red = np.zeros(n)
            for s in range(S):
                if gidx[s] == g:
                    red = red + cut[:, s]
            gain_num[g] += max(0.0, exposed - (total - red).max())
        if s1_pre >= 0:
            dc = d.copy()
            for s in range(S):
                if gidx[s] == s1_pre:
                    dc[:, s] = np.minimum(d[:, s], B[:, s])
            Fc = np.cumsum(dc, axis=1).max(axis=0)
            prev = 0.0
            for s in range(S):
                cf_adv[gidx[s]] += Fc[s] - prev
                prev = Fc[s]
            cf_denom += prev

    steps = len(scored)
    denom = sum(exposed_steps)
    shares_valid = steps > 0 and denom >= cfg["share_floor_s"]
    shares = [a / denom if shares_valid else 0.0 for a in adv]
    gains = [x / denom if denom > 0 else 0.0 for x in gain_num]
    order = sorted(range(G), key=lambda g: (-adv[g], g))
    if G > 1 and adv[order[0]] > 0:
        dec.ge(adv[order[1]], adv[order[0]], "top-two order")
    median_step = median(exposed_steps) if exposed_steps else 0.0

    # ---- telemetry gates (Appendix C, Table 13) ----
    labels = set()
    limited = False
    missing_steps = N - steps
    missing_ranks = [r for r in range(R) if any(not w.present[t, r] for t in scored)]
    if not w.gather_ok or w.reasons or w.dropped > 0:
        limited = True
    if len(missing_ranks) > cfg["max_missing_ranks"] or missing_steps > 0 or steps == 0:
        limited = True
    if w.has_wall:
        pres = w.present
        resid = np.nansum(np.where(pres, w.d[:, :, S - 1], 0.0))
        over = np.sum(np.where(pres, w.overlap, 0.0))
        recorded = np.nansum(np.where(pres, w.wall, 0.0)) + over
        if recorded > 0:
            if dec.gt(resid / recorded, cfg["max_closure_residual_share"], "closure gate"):
                limited = True
            if dec.gt(over / recorded, cfg["max_overlap_error_share"], "overlap gate"):
                limited = True
    elif steps > 0 and cfg["require_wall"]:
        limited = True  # no wall: closure and overlap cannot be checked
    if steps > 0:
        labels.add("frontier_accounting")
    if limited:
        labels.add("telemetry_limited")
    roles = w.roles or []
    declared = {x for x in roles if x}
    roles_differ = len(declared) >= 2
    roles_weak = not roles or any(not x for x in roles)
    if roles_differ:
        labels.add("role_aware_needed")
    if accumulation_problem(w.stages, w.m):
        labels.add("gradient_accumulation_ambiguous")
    diagnose = not limited and not roles_differ and shares_valid and steps > 0

    # ---- ambiguity set E_amb = C_A u C_G (u C_R) ----
    s1 = order[0] if G else -1
    s2 = order[1] if G > 1 else -1
    a1 = shares[s1] if s1 >= 0 else 0.0
    g1 = gains[s1] if s1 >= 0 else 0.0
    c_a, c_g, amb = [], [], []
    if shares_valid and s1 >= 0 and a1 > 0:
        gmax = max(gains)
        for g in order:
            in_a = shares[g] > 0 and dec.ge(shares[g], a1 - cfg["eta_a"], "C_A")
            in_g = dec.ge(gains[g], cfg["gamma_g"], "C_G floor") and dec.ge(gains[g], gmax - cfg["eta_g"], "C_G")
            if in_a:
                c_a.append(g)
            if in_g:
                c_g.append(g)
            if in_a or in_g:
                amb.append(g)
        if cfg["ambiguity_residual_leaders"] and cf_denom > 0:
            rs = [x / cf_denom for x in cf_adv]
            top = max(0.0, max(rs))
            c_r = [h for h in range(G) if rs[h] > 0 and dec.ge(rs[h], top - cfg["eta_a"], "C_R")]
            amb = [g for g in order if g in amb or g in c_r]

    # ---- stage diagnosis (Appendix C) ----
    if diagnose and s1 >= 0 and adv[s1] > 0:
        dominant = dec.gt(a1, cfg["gamma_a"], "gamma_A")
        w1 = w.groups[s1] in cfg["wait_model"]
        conf = sum(conf_n[s] for s in range(S) if gidx[s] == s1)
        sw = sum(switches[s] for s in range(S) if gidx[s] == s1)
        chances = sum(conf_n[s] - 1 for s in range(S) if gidx[s] == s1 and conf_n[s] > 1)
        switching = R > 1 and conf >= 3 and chances > 0 and sw / chances > cfg["gamma_switch"]
        ambiguous = len(c_a) >= 2 or len(c_g) >= 2 or switching
        low_gain = dec.gt(cfg["gamma_g"], g1, "gamma_G")
        low_gain_w0 = dominant and not ambiguous and low_gain and not w1
        if R > 1 and (ambiguous or (low_gain_w0 and (not cfg["co_critical_needs_two_stages"] or len(amb) >= 2))):
            labels.add("co_critical")
        if dominant and not ambiguous:
            def agrees(score):  # top two by value, above 0
                v = score[s1]
                return v > 0 and sum(1 for g, x in enumerate(score) if g != s1 and dec.gt(x, v, "baseline top-2")) < 2
            if not low_gain and agrees(spread) and agrees(pmax):
                labels.add("direct_exposure")
            if low_gain and w1 and R > 1:
                labels.add("sync_wait_dependent")
            if w1 and R > 1 and not roles_weak:
                open_ = lag_inc[s1] / steps
                collapse = sum(min(0.0, lag_inc[g] / steps) for g in range(s1 + 1, G))
                if dec.gt(open_, 0.0, "lag opens") and dec.ge(-collapse, 0.5 * open_, "lag closes"):
                    labels.add("likely_sync_wait")

    # ---- forward CUDA-event side evidence (Table 12 device axis) ----
    ev_mask = w.present & (w.event > 0)
    sampled = int(ev_mask.sum())
    ready = int((w.present & (w.event == 1)).sum())
    if sampled > 0:
        per_rank = {r: [w.event_s[t, r] for t in range(N) if w.present[t, r] and w.event[t, r] == 1] for r in range(R)}
        eligible = [r for r in range(R) if len(per_rank[r]) >= cfg["min_event_samples"]]
        med = {r: median(per_rank[r]) for r in eligible}
        if dec.gt(cfg["min_event_ready_ratio"], ready / sampled, "event ready ratio") or cfg["event_scope_limited"]:
            labels.add("forward_event_scope_limited")
        elif eligible and diagnose and fwd >= 0:
            hi = max(eligible, key=lambda r: (med[r], -r))
            ev = med[hi]
            others = [med[r] for r in eligible if r != hi]  # leave-one-out: the other ranks
            cohort_ev = median(others) if others else ev
            high = bool(others) and median_step > 0 and dec.ge(ev - cohort_ev, cfg["gamma_event"] * median_step, "event high")
            if high and fwd in (s1, s2):
                labels.add("forward_device_supported")
            if high and s1 > fwd and w.groups[s1] != RESIDUAL and \
                    dec.ge(cfg["event_low_ratio"] * ev, adv[fwd] / steps, "forward stays short"):
                labels.add("forward_spillover_suspected")
            if not high and (s1 == fwd or dec.gt(shares[fwd], cfg["gamma_a"], "forward share")) and credit[fwd]:
                rf = min(credit[fwd], key=lambda r: (-credit[fwd][r], r))
                if len(credit[fwd]) > 1:
                    second = sorted(credit[fwd].values())[-2]
                    dec.ge(second, credit[fwd][rf], "forward leader")
                rows = [t for t in range(N) if w.present[t, rf]]
                if rf in med and rows:
                    cpu = sum(sum(w.d[t, rf, s] for s in range(S) if gidx[s] == fwd) for t in rows) / len(rows)
                    if cpu > 0 and dec.ge(cfg["event_low_ratio"] * cpu, med[rf], "event low"):
                        labels.add("forward_host_overhead_suspected")

    return {"labels": [x for x in LABELS if x in labels], "co_critical_stages": [w.groups[g] for g in amb],
            "fragile": sorted(set(dec.fragile))}
