//! Concurrency primitives that serve the upper layers (writer, server).
