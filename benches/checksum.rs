//! The store's checksum (`store::crc32c`, computed by `crc-fast`) against
//! the `crc32c` crate it replaced (issue 38: the snapshot's checksums were
//! about a sixth of the 100M restart's read). Same function, same result
//! (checked here on every buffer before timing).
//!
//! ```text
//! cargo bench --bench checksum
//! ```
//!
//! Sizes: a WAL record's 16-byte head and a one-put record's body (36
//! bytes, its ops), a 4 KiB page, and a 1 MiB buffer (a snapshot segment
//! at 100M entries is about 0.9 MiB; a record of 100K puts about 3.3 MB).
//! Throughput is bytes per second.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

fn bench(c: &mut Criterion) {
    for size in [16usize, 36, 4096, 1 << 20] {
        let bytes: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        assert_eq!(
            uuidmap_engine::store::crc32c(&bytes),
            crc32c::crc32c(&bytes),
            "the same function"
        );
        let mut g = c.benchmark_group(format!("crc32c/{size}B"));
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function("store (crc-fast)", |b| {
            b.iter(|| uuidmap_engine::store::crc32c(black_box(&bytes)))
        });
        g.bench_function("crc32c crate", |b| {
            b.iter(|| crc32c::crc32c(black_box(&bytes)))
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
