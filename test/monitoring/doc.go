// Package monitoring runs the shipped monitoring against a real Prometheus:
// the simulated world (test/world) and the controller binary with leader
// election, Debian's prometheus (make deps) scraping its metrics endpoint
// every second with the chart's alert rules loaded. After hourly and
// monthly nodes come and go (a monthly one stays as a spare) through some
// 429s, every alert rule must load and evaluate, every metric an alert reads
// must have series, none may fire, and every dashboard query must parse and
// return series, unless listed as expected-empty with why.
//
//	make build tools deps && go test -count=1 -v ./test/monitoring/
//
// It takes about 45 seconds on two cores.
package monitoring
