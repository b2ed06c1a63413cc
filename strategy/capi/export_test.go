package capi

// SelfCheckMessage is the message a declined answer carries when its own
// patches would leave differences; the tests compare against it.
const SelfCheckMessageForTest = selfCheckMessage
