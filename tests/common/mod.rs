//! Helpers shared by the integration tests.

/// The tests' one deterministic generator (testkit's splitmix64): spreads
/// small inputs over the whole space, so that keys derived from counters
/// hash like random ones.
pub use uuidmap_testkit::data::mix;
