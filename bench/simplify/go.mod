module agentd-bench-simplify

go 1.26
