// Package tour is the README's 5-minute tour as code: each function is one
// step, shown in the README exactly as it is in tour.go (between the README
// markers), and run by this package's examples, whose output the README
// shows too. The test TestREADMEShowsTheTour keeps them equal, so the tour
// cannot rot. The functions are complete: copy them into your own code.
package tour
