"""Scale-out on existing machinery: `atom serve --data-parallel-size N` starts N
replicas of the one-process server and puts sglang-router in front (docs/scaling.md).

placement.py splits the machine between replicas; commands.py writes the command lines
(a replica's hypercorn, the router's); supervisor.py starts, watches and drains them."""
