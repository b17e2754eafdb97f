-- Change the memory cap of this connection (past it DuckDB spills to its temporary folder). {limit}
-- is a quoted DuckDB size literal filled by the caller (SET takes no parameters): the in-process
-- bootstrap lowers it once the cluster-statistics matrix is fetched (autheval/estimation/estimators.py).
SET memory_limit = {limit}
