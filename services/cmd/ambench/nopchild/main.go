// Command nopchild is the tiny static child ambench spawns to measure the
// machine's spawn ceiling: it exits at once.
package main

func main() {}
