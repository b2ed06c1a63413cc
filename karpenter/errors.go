package karpenter

import "errors"

// Errors returned by this package wrap one of these; test with errors.Is.
var (
	// ErrInvalidArgument: a nil or malformed argument (nil client, nil
	// reader, an object that is not what the function takes).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidDump: a dump (ReadDump) or instance list (ReadInstances)
	// that cannot be read; the error names the document and object.
	ErrInvalidDump = errors.New("invalid dump")
	// ErrRead: listing objects from the cluster failed.
	ErrRead = errors.New("reading the cluster")
	// ErrCannotTell: a drift check lacks what it needs to judge (an
	// EC2NodeClass without resolved images, subnets or security groups, a
	// NodeClaim without an image id); like Karpenter, Explain then reports
	// no drift for that check and says why.
	ErrCannotTell = errors.New("cannot tell")
)
