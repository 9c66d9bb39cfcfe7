package main

// The commands that exist but cannot work yet fail with exitUnavailable and
// say why, rather than print something made up. There are none at present
// (`schedules` was one until the clients registered their schedules in the
// backend); the exit code stays reserved for them.
