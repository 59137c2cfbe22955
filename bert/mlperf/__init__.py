"""The MLPerf training log as the run writes it: the facts every writer and reader shares
(constants.py), the logger the trainer writes with (writer.py), the run's log files and their
names (logfile.py), and the reference convergence points a run is checked against at its start
(rcp.py, rcp_check.py). What is done with finished logs (read, check, package, plot) is offline
work, one floor up: bert/submission/."""
