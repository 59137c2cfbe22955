"""What is done with finished runs, offline: read their MLPerf logs, check them with the
official checker, package a submission, plot."""
