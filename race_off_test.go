//go:build !race

package main

// raceEnabled: the race detector slows the server down about twentyfold; load tests scale down with it.
const raceEnabled = false
