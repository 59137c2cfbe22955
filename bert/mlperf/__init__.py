"""The MLPerf training log, written and read in one place: the facts both sides share
(constants.py), the logger the trainer writes with (writer.py), and the readers: which logs are
whole, timed runs (reader.py), the official compliance checker on them (compliance.py), the
submission package with its system description (package.py, system_desc.py) and run plots
(plot.py). scripts/check_compliance.py, package_results.py and plot_run.py are their command
lines."""
