use uuid::Uuid;
use uuidmap::Index;

#[test]
fn inserts_grow_and_read_back() {
    let (mut w, r) = Index::with_capacity(0);
    let n = 200_000u128;
    for i in 1..=n {
        assert_eq!(w.insert(Uuid::from_u128(i * 7919), Uuid::from_u128(i)).unwrap(), None);
    }
    assert_eq!(r.len(), n as usize);
    for i in 1..=n {
        assert_eq!(r.get(&Uuid::from_u128(i * 7919)), Some(Uuid::from_u128(i)), "key {i}");
    }
    assert_eq!(r.get(&Uuid::from_u128(3)), None);
    for i in (1..=n).step_by(2) {
        assert_eq!(w.remove(&Uuid::from_u128(i * 7919)), Some(Uuid::from_u128(i)));
    }
    for i in 1..=n {
        let want = (i % 2 == 0).then(|| Uuid::from_u128(i));
        assert_eq!(r.get(&Uuid::from_u128(i * 7919)), want, "key {i}");
    }
    assert_eq!(r.scan().count(), n as usize / 2);
    println!("bytes/entry at {}: {}", r.len(), r.table_bytes() as f64 / r.len() as f64);
}
