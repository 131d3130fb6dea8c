// The tests' shared kit (one process runner, one free-port finder, one `waitUntil`, the
// binary's one locator and launcher), seen by every file of this suite.
@_exported import SIWATestSupport
