// Package testcerts writes a throwaway certificate authority and a serving
// certificate for tests that talk TLS to servers on the loopback address,
// such as a Cluster API runtime extension under test: point the server's
// certificate directory (extensionserver.Options.CertDir, controller-runtime's
// webhook CertDir) at the directory Write filled, and trust the pool it
// returns in the client. It is for tests only: the keys are throwaway and
// the certificates last a day.
package testcerts
