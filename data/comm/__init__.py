"""Host communication of the data pipeline: collectives over MPI or gloo (host.py), their wire
format (wire.py) and MPI's initialization (mpi.py)."""
