"""Tables, plots and summaries of sf-testbed experiments, from each results/NAME/rows.csv (experiments/report.py is
the command).

    stats       counting rows: k/n, rates, Tango's interval and McNemar's test for paired arms
    arms        the null arms (sham, shuffled) beside every hit count
    common      names, reading a row's files, the markdown table and header
    figures     matplotlib helpers every plot shares
    registry    experiment kind -> its report function; report(d) writes table.md and summary.json
    index       results/README.md and results/moved.json
    fixtures, routing, overhead, aba, periodic, sensitivity, torch_routing, stragglers, whatif, detect, gpu:
                one module per experiment family

Plots are drawn off-screen (Agg), chosen here before any module imports pyplot.
"""
import matplotlib

matplotlib.use("Agg")
