//! The suite's bank: a few accounts whose values check themselves, and the transactions
//! run on them.
//!
//! ```text
//! value  balance (i64, 8 B) | stamp (u32, 4 B) | check bytes up to value_bytes
//! ```
//!
//! The check bytes are a hash of the key, balance and stamp, so a value made of words of
//! two different writes (a torn read the protocol let through) fails [`decode`] except
//! with negligible probability, at any value size, including sizes that are not a
//! multiple of 8. Every write bumps the stamp, so even a write that keeps the balance
//! changes every word.
//!
//! Invariants after any run of a checked protocol: the balances sum to
//! `keys × INITIAL` (transfers move money, nothing creates it); every committed audit
//! of all accounts saw that sum; no committed transaction read a value that fails
//! [`decode`].

use dmtx_runtime::{Abort, Coordinator, Protocol, Table, TxnHints};

/// The bank table's id.
pub const TABLE: Table<[u8]> = Table::new(0);
/// Every account's opening balance.
pub const INITIAL: i64 = 100;
/// Smallest value: balance, stamp and one check byte.
pub const VALUE_BYTES_MIN: u32 = 13;

fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// Write account `key`'s value: `balance`, `stamp` and the check bytes.
pub fn encode(key: u64, balance: i64, stamp: u32, out: &mut [u8]) {
    assert!(out.len() >= VALUE_BYTES_MIN as usize);
    out[..8].copy_from_slice(&balance.to_le_bytes());
    out[8..12].copy_from_slice(&stamp.to_le_bytes());
    let h = mix(key ^ mix(balance as u64 ^ mix(stamp as u64 ^ 0x5eed)));
    for (j, b) in out[12..].iter_mut().enumerate() {
        *b = (mix(h ^ (j / 8) as u64) >> (8 * (j % 8))) as u8;
    }
}

/// `(balance, stamp)` of account `key`'s value, or `None` when its check bytes do not
/// match (a mixture of two writes).
pub fn decode(key: u64, v: &[u8]) -> Option<(i64, u32)> {
    let balance = i64::from_le_bytes(v[..8].try_into().unwrap());
    let stamp = u32::from_le_bytes(v[8..12].try_into().unwrap());
    let mut want = vec![0u8; v.len()];
    encode(key, balance, stamp, &mut want);
    (want == v).then_some((balance, stamp))
}

/// What a coordinator's transactions saw that breaks the bank's invariants.
#[derive(Debug, Default)]
pub struct Seen {
    /// Committed transactions that read a value failing [`decode`].
    pub torn: Vec<String>,
    /// Committed audits of every account whose sum was not the total.
    pub bad_audits: Vec<String>,
}

/// Read `obj` of a transaction; `intact` turns false if it fails [`decode`].
fn read<P: Protocol>(
    t: &dmtx_runtime::Txn<'_, P>,
    key: u64,
    obj: dmtx_runtime::ObjRef,
    intact: &mut bool,
) -> (i64, u32) {
    let v = t.bytes(obj);
    match decode(key, v) {
        Some(x) => x,
        None => {
            *intact = false;
            (i64::from_le_bytes(v[..8].try_into().unwrap()), 0)
        }
    }
}

fn torn_note(seen: &mut Seen, what: &str, keys: &[u64], intact: bool, res: &Result<(), Abort>) {
    if res.is_ok() && !intact {
        seen.torn
            .push(format!("a committed {what} of keys {keys:?} read a torn value"));
    }
}

/// Move `amount` from `a` to `b`.
pub async fn transfer<P: Protocol>(
    c: &mut Coordinator<P>,
    a: u64,
    b: u64,
    amount: i64,
    seen: &mut Seen,
) -> Result<(), Abort> {
    let mut intact = true;
    let res = async {
        let mut t = c.begin_with(TxnHints::DECLARED);
        let x = t.add_rw(TABLE, a);
        let y = t.add_rw(TABLE, b);
        t.execute().await?;
        let (xb, xs) = read(&t, a, x, &mut intact);
        let (yb, ys) = read(&t, b, y, &mut intact);
        encode(a, xb - amount, xs.wrapping_add(1), t.bytes_mut(x));
        encode(b, yb + amount, ys.wrapping_add(1), t.bytes_mut(y));
        t.commit().await
    }
    .await;
    torn_note(seen, "transfer", &[a, b], intact, &res);
    res
}

/// Read `a` alone: a read-only transaction of one object, which protocols often let
/// skip validation (so only the tear detector stands between it and a torn value).
pub async fn read_one<P: Protocol>(c: &mut Coordinator<P>, a: u64, seen: &mut Seen) -> Result<i64, Abort> {
    let mut intact = true;
    let mut balance = 0;
    let res = async {
        let mut t = c.begin_with(TxnHints::READ_ONLY_DECLARED);
        let x = t.add_ro(TABLE, a);
        t.execute().await?;
        balance = read(&t, a, x, &mut intact).0;
        t.commit().await
    }
    .await;
    torn_note(seen, "read", &[a], intact, &res);
    res.map(|()| balance)
}

/// Read every account of `0..keys`; a committed audit must see `keys × INITIAL`.
pub async fn audit<P: Protocol>(c: &mut Coordinator<P>, keys: u64, seen: &mut Seen) -> Result<(), Abort> {
    let mut intact = true;
    let mut sum = 0;
    let res = async {
        let mut t = c.begin_with(TxnHints::READ_ONLY_DECLARED);
        let objs: Vec<_> = (0..keys).map(|k| t.add_ro(TABLE, k)).collect();
        t.execute().await?;
        for (k, &o) in objs.iter().enumerate() {
            sum += read(&t, k as u64, o, &mut intact).0;
        }
        t.commit().await
    }
    .await;
    torn_note(seen, "audit", &[0, keys - 1], intact, &res);
    if res.is_ok() && intact && sum != keys as i64 * INITIAL {
        seen.bad_audits.push(format!(
            "a committed audit of {keys} accounts summed {sum}, not {}",
            keys as i64 * INITIAL
        ));
    }
    res
}

/// Read `a`, write `b` (its stamp, from what `a` held): read-write with read-only data,
/// the shape of write skew.
pub async fn read_then_write<P: Protocol>(
    c: &mut Coordinator<P>,
    a: u64,
    b: u64,
    seen: &mut Seen,
) -> Result<(), Abort> {
    let mut intact = true;
    let res = async {
        let mut t = c.begin_with(TxnHints::DECLARED);
        let x = t.add_ro(TABLE, a);
        let y = t.add_rw(TABLE, b);
        t.execute().await?;
        let (_, xs) = read(&t, a, x, &mut intact);
        let (yb, ys) = read(&t, b, y, &mut intact);
        encode(b, yb, ys.wrapping_add(1).max(xs), t.bytes_mut(y));
        t.commit().await
    }
    .await;
    torn_note(seen, "read-then-write", &[a, b], intact, &res);
    res
}

/// Draw and run one transaction of the contended mix on `keys` accounts: 40% transfers,
/// 20% single reads, 15% audits of every account, 25% read-then-write.
pub async fn one<P: Protocol>(
    c: &mut Coordinator<P>,
    keys: u64,
    rng: &mut impl rand::Rng,
    seen: &mut Seen,
) -> Result<(), Abort> {
    let a = rng.random_range(0..keys);
    let b = (a + rng.random_range(1..keys)) % keys;
    match rng.random_range(0..20) {
        0..8 => transfer(c, a, b, rng.random_range(1..10), seen).await,
        8..12 => read_one(c, a, seen).await.map(|_| ()),
        12..15 => audit(c, keys, seen).await,
        _ => read_then_write(c, a, b, seen).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_decode_and_any_mixture_of_two_writes_does_not() {
        for len in [13usize, 20, 44] {
            let mut old = vec![0u8; len];
            let mut new = vec![0u8; len];
            encode(3, 100, 7, &mut old);
            encode(3, 97, 8, &mut new);
            assert_eq!(decode(3, &old), Some((100, 7)));
            assert_eq!(decode(3, &new), Some((97, 8)));
            assert_eq!(decode(4, &old), None, "the key is covered");
            let words = len.div_ceil(8);
            for mask in 1u32..(1 << words) - 1 {
                let mut m = old.clone();
                for w in 0..words {
                    if mask & (1 << w) != 0 {
                        let end = (w * 8 + 8).min(len);
                        m[w * 8..end].copy_from_slice(&new[w * 8..end]);
                    }
                }
                assert_eq!(decode(3, &m), None, "{len} bytes, words {mask:#b} new");
            }
        }
    }
}
