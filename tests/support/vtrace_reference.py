"""V-trace by the IMPALA paper's definition (Espeholt et al. 2018, eq. 1), in plain NumPy: the
reference agent/vtrace.cpp is checked against (tests/unit/agent/vtrace_test.cpp).

The C++ code runs the paper's backward recursion (remark 1); this script sums eq. 1 forward,
term by term, so the two share no code and no formulation:

    v_s = V(x_s) + sum_{t=s}^{s+n-1} gamma^(t-s) (prod_{i=s}^{t-1} c_i) delta_t V

where the sum stops at the trajectory's end or at the first step that ends an episode (its
delta included: a terminated step's successor is worth 0, a truncated one's is V(final)).

Usage: vtrace_reference.py INPUT [BUG]   (BUG plants a known mistake, to show the test fails:
  "no-clip" drops the rho/c clipping, "boundary" lets the trace run on into the next episode)
INPUT: line 1 "T E gamma lambda rho_bar c_bar pg_rho_bar"; then one line each of log_rhos,
rewards, values (T*E, time-major), bootstrap (E), terminated, truncated, truncated_values (T*E).
Prints two lines: vs and the policy-gradient advantages (T*E each). Exits 3 without NumPy.
"""
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not installed")
    sys.exit(3)


def main():
    lines = open(sys.argv[1]).read().split("\n")
    bug = sys.argv[2] if len(sys.argv) > 2 else ""
    head = lines[0].split()
    T, E = int(head[0]), int(head[1])
    gamma, lam, rho_bar, c_bar, pg_rho_bar = (float(x) for x in head[2:7])
    arr = [np.array([float(x) for x in line.split()], dtype=np.float64) for line in lines[1:8]]
    log_rhos, rewards, values, bootstrap, term, trunc, trunc_v = arr
    shape = (T, E)
    log_rhos, rewards, values = log_rhos.reshape(shape), rewards.reshape(shape), values.reshape(shape)
    term, trunc, trunc_v = term.reshape(shape) > 0, trunc.reshape(shape) > 0, trunc_v.reshape(shape)
    ratios = np.exp(log_rhos)
    if bug == "no-clip":
        rhos, cs, pg_rhos = ratios, lam * ratios, ratios
    else:
        rhos, cs, pg_rhos = np.minimum(rho_bar, ratios), lam * np.minimum(c_bar, ratios), np.minimum(pg_rho_bar, ratios)

    def successor_value(t, e):  # V(x_{t+1}) as the episode sees it
        if term[t, e]:
            return 0.0
        if trunc[t, e]:
            return trunc_v[t, e]
        return values[t + 1, e] if t + 1 < T else bootstrap[e]

    deltas = np.zeros(shape)
    for t in range(T):
        for e in range(E):
            deltas[t, e] = rhos[t, e] * (rewards[t, e] + gamma * successor_value(t, e) - values[t, e])

    vs = np.zeros(shape)
    for e in range(E):
        for s in range(T):
            total, weight = values[s, e], 1.0
            for t in range(s, T):
                total += weight * deltas[t, e]
                ended = term[t, e] or trunc[t, e]
                if ended and bug != "boundary":
                    break
                weight *= gamma * cs[t, e]
            vs[s, e] = total

    adv = np.zeros(shape)
    for t in range(T):
        for e in range(E):
            if term[t, e]:
                nxt = 0.0
            elif trunc[t, e]:
                nxt = trunc_v[t, e]
            else:
                nxt = vs[t + 1, e] if t + 1 < T else bootstrap[e]
            adv[t, e] = pg_rhos[t, e] * (rewards[t, e] + gamma * nxt - values[t, e])

    print(" ".join(repr(float(x)) for x in vs.reshape(-1)))
    print(" ".join(repr(float(x)) for x in adv.reshape(-1)))


main()
