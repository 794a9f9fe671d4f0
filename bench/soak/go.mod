module agentd-soak

go 1.26
