//! SmallBank (H-Store's definition, as FORD §6.1/§6.2.3 and Motor §7.1 run it).
//!
//! Two tables keyed by account id `0..accounts`: `savings` (id 0) and `checking` (id 1),
//! each value one `i64` balance in cents (FORD's records are 16 B: a 4-byte magic and a
//! 4-byte `float`, padded; dmtx keeps the 8-byte balance and uses integer cents so money
//! is conserved exactly — a `float` cannot even represent FORD's `1e9 + 1.30`).
//!
//! # Transactions (FORD Table 2, and FORD's `smallbank_txn.cc` for the logic)
//!
//! | type | index | % | savings | checking | logic | net money |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | `amalgamate` | 0 | 15 | RW a | RW a, RW b | `chk[b] += sav[a] + chk[a]`; `sav[a] = chk[a] = 0` | 0 |
//! | `balance` | 1 | 15 | RO a | RO a | read `sav[a] + chk[a]` | 0 |
//! | `deposit_checking` | 2 | 15 | — | RW a | `chk[a] += 1.30` | +130 |
//! | `send_payment` | 3 | 25 | — | RW a, RW b | user abort if `chk[a] < 5.00`, else move 5.00 from a to b | 0 |
//! | `transact_saving` | 4 | 15 | RW a | — | `sav[a] += 20.20`; user abort if the result is negative | +2020 |
//! | `write_check` | 5 | 15 | RO a | RW a | `chk[a] -= 5.00`, or 6.00 (overdraft penalty) if `sav[a] + chk[a] < 5.00` | −500 / −600 |
//!
//! 85% of the mix writes (FORD §6.1). `transact_saving` keeps H-Store's negative-balance
//! abort, although with FORD's positive amount and no transaction ever making a savings
//! balance negative it does not fire; `send_payment`'s insufficient-funds abort does,
//! on accounts that `amalgamate` emptied. Both are `AbortReason::User`.
//!
//! # Accounts (FORD's `get_account` / `get_two_accounts`)
//!
//! Per transaction, with probability `hot_pct`% every account is drawn uniformly from
//! the hot set `0..hot_accounts`, otherwise uniformly from all `0..accounts` (hot ones
//! included). The two accounts of `amalgamate` and `send_payment` are distinct. FORD
//! and DrTM+H/FaSST use 100 000 accounts, 4 000 hot, 90% (OLTP-Bench's SmallBank has
//! the same 90/"hotspot" split); those are the defaults.
//!
//! # Load and invariant
//!
//! Every savings and checking record starts at [`INITIAL_BALANCE_CENTS`] ($10 000.00;
//! FORD loads `1e9` into a `float`). Each coordinator adds the net money of a
//! transaction to its local delta only after `commit` returned `Ok`, so
//! [`SmallBank::check`] asserts money conservation: `Σ savings + Σ checking =
//! 2 × accounts × INITIAL_BALANCE_CENTS + Σ committed deltas`, and that both tables hold
//! exactly the keys `0..accounts`.

use dmtx_runtime::{Abort, CoordId, Coordinator, KnobError, KnobSpec, Knobs, Protocol, Table, TxnHints};
use dmtx_store::{Attr, StoreError, TableSpec};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

use crate::workload::invalid;
use crate::zipf::uniform;
use crate::{InvariantError, Outcome, RecordSink, Snapshot, Workload};

/// Id of the savings table.
pub const SAVINGS_TABLE_ID: u32 = 0;
/// Id of the checking table.
pub const CHECKING_TABLE_ID: u32 = 1;
const SAVINGS: Table<i64> = Table::new(SAVINGS_TABLE_ID);
const CHECKING: Table<i64> = Table::new(CHECKING_TABLE_ID);

/// Every balance at load, in cents.
pub const INITIAL_BALANCE_CENTS: i64 = 1_000_000;
/// `deposit_checking`'s amount (FORD: 1.3).
pub const DEPOSIT_CHECKING_CENTS: i64 = 130;
/// `send_payment`'s amount (FORD: 5.0).
pub const SEND_PAYMENT_CENTS: i64 = 500;
/// `transact_saving`'s amount (FORD: 20.20).
pub const TRANSACT_SAVING_CENTS: i64 = 2020;
/// `write_check`'s amount (FORD: 5.0).
pub const WRITE_CHECK_CENTS: i64 = 500;
/// `write_check`'s overdraft penalty (FORD: 1).
pub const OVERDRAFT_PENALTY_CENTS: i64 = 100;

/// Transaction type names, in `run_one`'s index order.
const TXN_TYPES: [&str; 6] = [
    "amalgamate",
    "balance",
    "deposit_checking",
    "send_payment",
    "transact_saving",
    "write_check",
];
const AMALGAMATE: usize = 0;
const BALANCE: usize = 1;
const DEPOSIT_CHECKING: usize = 2;
const SEND_PAYMENT: usize = 3;
const TRANSACT_SAVING: usize = 4;
const WRITE_CHECK: usize = 5;

/// FORD Table 2's frequencies (percent), in index order.
pub const MIX_PERCENT: [u8; 6] = [15, 15, 15, 25, 15, 15];

/// Type index of each of 100 slots, as FORD's `CreateWorkgenArray`.
const MIX_TABLE: [u8; 100] = {
    let mut t = [0u8; 100];
    let mut ty = 0;
    let mut at = 0;
    while ty < MIX_PERCENT.len() {
        let mut i = 0;
        while i < MIX_PERCENT[ty] {
            t[at] = ty as u8;
            at += 1;
            i += 1;
        }
        ty += 1;
    }
    assert!(at == 100, "the mix must sum to 100%");
    t
};

/// Draws of a second account before falling back to the next one (distinct accounts).
const ACCOUNT_DRAW_MAX: u32 = 64;

const ACCOUNTS: KnobSpec = KnobSpec {
    name: "accounts",
    default: "100000",
    help: "accounts, each with a savings and a checking record (FORD: 100000, Motor: 10000000)",
};
const HOT_ACCOUNTS: KnobSpec = KnobSpec {
    name: "hot_accounts",
    default: "4000",
    help: "accounts 0..hot_accounts form the hot set (FORD: 4000); capped at `accounts` when not set",
};
const HOT_PCT: KnobSpec = KnobSpec {
    name: "hot_pct",
    default: "90",
    help: "percent of transactions that draw their accounts from the hot set (FORD: 90)",
};

/// SmallBank settings (what the knobs hold).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmallBankConfig {
    /// Accounts; at least 2.
    pub accounts: u64,
    /// Size of the hot set `0..hot_accounts`; in `2..=accounts`.
    pub hot_accounts: u64,
    /// Percent of transactions on the hot set, `0..=100`.
    pub hot_pct: u32,
}

impl Default for SmallBankConfig {
    fn default() -> Self {
        Self {
            accounts: 100_000,
            hot_accounts: 4000,
            hot_pct: 90,
        }
    }
}

/// The SmallBank workload.
#[derive(Clone, Debug)]
pub struct SmallBank {
    cfg: SmallBankConfig,
}

/// Per-coordinator SmallBank state.
#[derive(Debug)]
pub struct SmallBankLocal {
    rng: SmallRng,
    delta_cents: i64,
    committed: [u64; 6],
}

impl SmallBankLocal {
    /// Net money created (positive) or destroyed by this coordinator's committed
    /// transactions, in cents.
    pub fn delta_cents(&self) -> i64 {
        self.delta_cents
    }

    /// Committed transactions by type index.
    pub fn committed(&self) -> &[u64; 6] {
        &self.committed
    }
}

impl SmallBank {
    /// SmallBank with `cfg`, or the knob that is out of range.
    pub fn new(cfg: SmallBankConfig) -> Result<Self, KnobError> {
        if cfg.accounts < 2 {
            return Err(invalid(
                &ACCOUNTS,
                cfg.accounts,
                "must be at least 2 (two-account transactions need distinct accounts)",
            ));
        }
        if cfg.hot_accounts < 2 || cfg.hot_accounts > cfg.accounts {
            return Err(invalid(
                &HOT_ACCOUNTS,
                cfg.hot_accounts,
                format!(
                    "must be in 2..=accounts ({}); lower `hot_accounts` or raise `accounts`",
                    cfg.accounts
                ),
            ));
        }
        if cfg.hot_pct > 100 {
            return Err(invalid(&HOT_PCT, cfg.hot_pct, "must be in 0..=100"));
        }
        Ok(Self { cfg })
    }

    /// The settings.
    pub fn config(&self) -> &SmallBankConfig {
        &self.cfg
    }

    /// A transaction type index per [`MIX_PERCENT`].
    #[inline]
    fn pick_type(rng: &mut SmallRng) -> usize {
        MIX_TABLE[((rng.next_u32() as u64 * 100) >> 32) as usize] as usize
    }

    /// The pool this transaction draws accounts from: the hot set or all accounts.
    #[inline]
    fn pool(&self, rng: &mut SmallRng) -> u64 {
        if uniform(rng, 100) < self.cfg.hot_pct as u64 {
            self.cfg.hot_accounts
        } else {
            self.cfg.accounts
        }
    }

    /// One account (FORD's `get_account`).
    #[inline]
    fn account(&self, rng: &mut SmallRng) -> u64 {
        let pool = self.pool(rng);
        uniform(rng, pool)
    }

    /// Two distinct accounts from one pool (FORD's `get_two_accounts`). After
    /// [`ACCOUNT_DRAW_MAX`] equal draws the second is the first's successor in the pool.
    #[inline]
    fn two_accounts(&self, rng: &mut SmallRng) -> (u64, u64) {
        let pool = self.pool(rng);
        debug_assert!(pool >= 2);
        let a = uniform(rng, pool);
        let mut b = uniform(rng, pool);
        let mut draws = 1;
        while b == a {
            b = if draws < ACCOUNT_DRAW_MAX {
                draws += 1;
                uniform(rng, pool)
            } else if a + 1 == pool {
                0
            } else {
                a + 1
            };
        }
        (a, b)
    }
}

/// One SmallBank transaction: its type and accounts (the second unused by
/// one-account types).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SmallBankInput {
    ty: usize,
    accounts: (u64, u64),
}

impl Workload for SmallBank {
    type Local = SmallBankLocal;
    type Input = SmallBankInput;

    const NAME: &'static str = "smallbank";
    const TXN_STEP: &'static str = "smallbank.txn";
    const SCALE_KNOB: Option<&'static str> = Some("accounts");
    const ABOUT: &'static str =
        "SmallBank (H-Store; FORD Table 2 mix): savings and checking, 6 transaction types, 85% read-write";
    const KNOBS: &'static [KnobSpec] = &[ACCOUNTS, HOT_ACCOUNTS, HOT_PCT];

    fn from_knobs(knobs: &Knobs) -> Result<Self, KnobError> {
        let accounts: u64 = knobs.get(&ACCOUNTS)?;
        let hot_set = knobs.iter().any(|(k, _)| k == HOT_ACCOUNTS.name);
        let mut hot_accounts: u64 = knobs.get(&HOT_ACCOUNTS)?;
        if !hot_set {
            hot_accounts = hot_accounts.min(accounts);
        }
        Self::new(SmallBankConfig {
            accounts,
            hot_accounts,
            hot_pct: knobs.get(&HOT_PCT)?,
        })
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TXN_TYPES
    }

    /// Every type adds its one or two accounts' records before its one execute; only
    /// Balance writes nothing.
    fn txn_hints(&self, ty: usize) -> TxnHints {
        if ty == BALANCE {
            TxnHints::READ_ONLY_DECLARED
        } else {
            TxnHints::DECLARED
        }
    }

    fn tables(&self) -> Vec<TableSpec> {
        vec![
            TableSpec::new(SAVINGS_TABLE_ID, "savings", 8, self.cfg.accounts)
                .with_attrs(vec![Attr::new("balance", 0, 8)]),
            TableSpec::new(CHECKING_TABLE_ID, "checking", 8, self.cfg.accounts)
                .with_attrs(vec![Attr::new("balance", 0, 8)]),
        ]
    }

    fn load(&self, table: u32, insert: &mut RecordSink<'_>) -> Result<(), StoreError> {
        if table != SAVINGS_TABLE_ID && table != CHECKING_TABLE_ID {
            return Err(StoreError::UnknownTable(table));
        }
        let value = INITIAL_BALANCE_CENTS.to_le_bytes();
        for acct in 0..self.cfg.accounts {
            insert(acct, &value)?;
        }
        Ok(())
    }

    fn local(&self, _coord: CoordId, seed: u64) -> SmallBankLocal {
        SmallBankLocal {
            rng: SmallRng::seed_from_u64(seed),
            delta_cents: 0,
            committed: [0; 6],
        }
    }

    fn draw(&self, local: &mut SmallBankLocal) -> (usize, SmallBankInput) {
        let rng = &mut local.rng;
        let ty = Self::pick_type(rng);
        let accounts = match ty {
            AMALGAMATE | SEND_PAYMENT => self.two_accounts(rng),
            BALANCE | DEPOSIT_CHECKING | TRANSACT_SAVING | WRITE_CHECK => (self.account(rng), 0),
            _ => unreachable!("MIX_TABLE holds type indices below {}", TXN_TYPES.len()),
        };
        (ty, SmallBankInput { ty, accounts })
    }

    async fn run<P: Protocol>(
        &self,
        local: &mut SmallBankLocal,
        input: &SmallBankInput,
        coord: &mut Coordinator<P>,
    ) -> Result<Outcome, Abort> {
        let ty = input.ty;
        let (a, b) = input.accounts;
        let mut txn = coord.begin_with(self.txn_hints(ty));
        // Net money this transaction creates if it commits.
        let delta: i64;
        match ty {
            AMALGAMATE => {
                let sav_a = txn.add_rw(SAVINGS, a);
                let chk_a = txn.add_rw(CHECKING, a);
                let chk_b = txn.add_rw(CHECKING, b);
                txn.execute().await?;
                let total = *txn.get(sav_a) + *txn.get(chk_a);
                *txn.get_mut(chk_b) += total;
                *txn.get_mut(sav_a) = 0;
                *txn.get_mut(chk_a) = 0;
                delta = 0;
            }
            BALANCE => {
                txn.add_ro(SAVINGS, a);
                txn.add_ro(CHECKING, a);
                delta = 0;
            }
            DEPOSIT_CHECKING => {
                let chk = txn.add_rw(CHECKING, a);
                txn.execute().await?;
                *txn.get_mut(chk) += DEPOSIT_CHECKING_CENTS;
                delta = DEPOSIT_CHECKING_CENTS;
            }
            SEND_PAYMENT => {
                let chk_a = txn.add_rw(CHECKING, a);
                let chk_b = txn.add_rw(CHECKING, b);
                txn.execute().await?;
                if *txn.get(chk_a) < SEND_PAYMENT_CENTS {
                    return Err(txn.abort());
                }
                *txn.get_mut(chk_a) -= SEND_PAYMENT_CENTS;
                *txn.get_mut(chk_b) += SEND_PAYMENT_CENTS;
                delta = 0;
            }
            TRANSACT_SAVING => {
                let sav = txn.add_rw(SAVINGS, a);
                txn.execute().await?;
                let balance = *txn.get(sav) + TRANSACT_SAVING_CENTS;
                if balance < 0 {
                    return Err(txn.abort());
                }
                *txn.get_mut(sav) = balance;
                delta = TRANSACT_SAVING_CENTS;
            }
            WRITE_CHECK => {
                let sav = txn.add_ro(SAVINGS, a);
                let chk = txn.add_rw(CHECKING, a);
                txn.execute().await?;
                let debit = if *txn.get(sav) + *txn.get(chk) < WRITE_CHECK_CENTS {
                    WRITE_CHECK_CENTS + OVERDRAFT_PENALTY_CENTS
                } else {
                    WRITE_CHECK_CENTS
                };
                *txn.get_mut(chk) -= debit;
                delta = -debit;
            }
            _ => unreachable!("MIX_TABLE holds type indices below {}", TXN_TYPES.len()),
        }
        txn.commit().await?;
        // Only the attempt that commits records its effect (a retried one left none).
        local.delta_cents += delta;
        local.committed[ty] += 1;
        Ok(Outcome::Committed)
    }

    fn check(&self, locals: &[SmallBankLocal], snapshot: &Snapshot) -> Result<String, InvariantError> {
        let n = self.cfg.accounts;
        let mut total: i128 = 0;
        for (table, name) in [(SAVINGS_TABLE_ID, "savings"), (CHECKING_TABLE_ID, "checking")] {
            let records = snapshot.len(table) as u64;
            if records != n {
                return Err(InvariantError {
                    invariant: "smallbank_accounts",
                    detail: format!("table `{name}`: expected {n} records, found {records}"),
                });
            }
            for (i, (key, bytes)) in snapshot.iter(table).enumerate() {
                if key != i as u64 {
                    return Err(InvariantError {
                        invariant: "smallbank_accounts",
                        detail: format!("table `{name}`: keys must be exactly 0..{n}; position {i} holds key {key}"),
                    });
                }
                let Ok(b) = <[u8; 8]>::try_from(bytes) else {
                    return Err(InvariantError {
                        invariant: "smallbank_accounts",
                        detail: format!("table `{name}` key {key}: {}-byte value, expected 8", bytes.len()),
                    });
                };
                total += i64::from_le_bytes(b) as i128;
            }
        }
        let initial = 2 * n as i128 * INITIAL_BALANCE_CENTS as i128;
        let delta: i128 = locals.iter().map(|l| l.delta_cents as i128).sum();
        let commits: u64 = locals.iter().flat_map(|l| l.committed.iter()).sum();
        if total != initial + delta {
            return Err(InvariantError {
                invariant: "money_conservation",
                detail: format!(
                    "Σ balances = {total} cents, expected initial {initial} + committed delta {delta} = {} (off by {})",
                    initial + delta,
                    total - (initial + delta)
                ),
            });
        }
        Ok(format!(
            "smallbank money_conservation: Σ balances of {n} accounts × 2 = {total} cents = initial {initial} + delta {delta} of {commits} commits"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, knobs};
    use dmtx_runtime::AbortReason;

    #[test]
    fn both_tables_declare_the_balance_attribute() {
        let s = testkit::declared_schemas(&SmallBank::from_knobs(&Knobs::default()).unwrap());
        for t in ["savings", "checking"] {
            assert_eq!(s[t], vec![("balance".to_string(), 8)], "{t}");
        }
    }

    #[test]
    fn mix_table_matches_ford_table_2() {
        for (ty, &pct) in MIX_PERCENT.iter().enumerate() {
            assert_eq!(MIX_TABLE.iter().filter(|&&t| t as usize == ty).count(), pct as usize);
        }
        // 85% of the mix writes: everything but balance.
        assert_eq!(100 - MIX_PERCENT[BALANCE] as u32, 85);
        let mut rng = SmallRng::seed_from_u64(3);
        let picks = 100_000;
        let mut counts = [0u64; 6];
        for _ in 0..picks {
            counts[SmallBank::pick_type(&mut rng)] += 1;
        }
        for ty in 0..6 {
            let share = counts[ty] as f64 / picks as f64;
            let want = MIX_PERCENT[ty] as f64 / 100.0;
            assert!((share - want).abs() < 0.01, "{}: {share}", TXN_TYPES[ty]);
        }
    }

    #[test]
    fn accounts_follow_the_hot_set() {
        let w = SmallBank::new(SmallBankConfig::default()).unwrap();
        let mut rng = SmallRng::seed_from_u64(8);
        let picks = 100_000;
        let mut hot = 0;
        for _ in 0..picks {
            let a = w.account(&mut rng);
            assert!(a < 100_000);
            hot += u64::from(a < 4000);
            let (x, y) = w.two_accounts(&mut rng);
            assert_ne!(x, y);
            assert!(x < 100_000 && y < 100_000);
        }
        // P(hot) = 0.9 + 0.1 × 4000/100000 = 0.904.
        let share = hot as f64 / picks as f64;
        assert!((share - 0.904).abs() < 0.01, "{share}");
        // With hot_pct = 100 both accounts always come from the hot set.
        let w = SmallBank::new(SmallBankConfig {
            hot_pct: 100,
            ..SmallBankConfig::default()
        })
        .unwrap();
        for _ in 0..1000 {
            let (x, y) = w.two_accounts(&mut rng);
            assert!(x < 4000 && y < 4000);
            assert!(w.account(&mut rng) < 4000);
        }
        // A two-account pool of exactly 2 still terminates with distinct accounts.
        let w = SmallBank::new(SmallBankConfig {
            accounts: 2,
            hot_accounts: 2,
            hot_pct: 50,
        })
        .unwrap();
        for _ in 0..1000 {
            let (x, y) = w.two_accounts(&mut rng);
            assert_ne!(x, y);
        }
    }

    #[test]
    fn from_knobs_defaults_and_errors() {
        let w = SmallBank::from_knobs(&Knobs::default()).unwrap();
        assert_eq!(w.config(), &SmallBankConfig::default());
        // An unset hot set is capped at `accounts`; an explicit one is checked.
        let w = SmallBank::from_knobs(&knobs(&["accounts=100"])).unwrap();
        assert_eq!(w.config().hot_accounts, 100);
        let e = SmallBank::from_knobs(&knobs(&["accounts=100", "hot_accounts=200"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lower `hot_accounts` or raise `accounts`"), "{e}");
        for (bad, needle) in [
            ("accounts=1", "at least 2"),
            ("accounts=x", "`accounts` = `x`"),
            ("hot_accounts=1", "2..=accounts"),
            ("hot_pct=101", "0..=100"),
            ("hot_pct=-1", "`hot_pct` = `-1`"),
        ] {
            let e = SmallBank::from_knobs(&knobs(&[bad])).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn load_produces_every_account_in_both_tables() {
        let w = SmallBank::new(SmallBankConfig {
            accounts: 300,
            hot_accounts: 10,
            hot_pct: 90,
        })
        .unwrap();
        let specs = w.tables();
        assert_eq!(
            specs
                .iter()
                .map(|s| (s.id, s.name.as_str(), s.value_bytes, s.capacity))
                .collect::<Vec<_>>(),
            [(0, "savings", 8, 300), (1, "checking", 8, 300)]
        );
        for t in [SAVINGS_TABLE_ID, CHECKING_TABLE_ID] {
            let mut seen = Vec::new();
            w.load(t, &mut |k, v| {
                assert_eq!(v, INITIAL_BALANCE_CENTS.to_le_bytes());
                seen.push(k);
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, (0..300).collect::<Vec<_>>());
        }
        assert!(matches!(
            w.load(2, &mut |_, _| Ok(())),
            Err(StoreError::UnknownTable(2))
        ));
    }

    #[test]
    fn check_counts_committed_deltas() {
        let w = SmallBank::new(SmallBankConfig {
            accounts: 3,
            hot_accounts: 2,
            hot_pct: 90,
        })
        .unwrap();
        let mut s = Snapshot::new();
        for t in [SAVINGS_TABLE_ID, CHECKING_TABLE_ID] {
            for k in 0..3 {
                let bal = INITIAL_BALANCE_CENTS + if t == 1 && k == 2 { 130 } else { 0 };
                s.push(t, k, &bal.to_le_bytes());
            }
        }
        s.seal();
        let mut l = w.local(
            CoordId {
                cn: 0,
                thread: 0,
                coroutine: 0,
            },
            1,
        );
        let e = w.check(std::slice::from_ref(&l), &s).unwrap_err();
        assert_eq!(e.invariant, "money_conservation");
        assert!(e.detail.contains("off by 130"), "{e}");
        l.delta_cents = 130;
        assert!(w.check(&[l], &s).is_ok());
    }

    #[test]
    fn end_to_end_under_ford_conserves_money() {
        // Goal: SmallBank under FORD, with coordinators interleaved on one thread over a
        // small hot set so they conflict, conserves money given the committed deltas.
        // Method: run, scan both tables, check; also assert the mix ran every type and
        // that send_payment's insufficient-funds path (user abort) was taken.
        let w = SmallBank::new(SmallBankConfig {
            accounts: 1000,
            hot_accounts: 20,
            hot_pct: 90,
        })
        .unwrap();
        let run = testkit::run_under_ford(&w, 4, 1500, 7);
        assert_eq!(run.attempted(), 6000);
        assert!(run.committed.iter().all(|&c| c > 50), "every type commits: {run:?}");
        assert!(run.aborts.get(&AbortReason::User).copied().unwrap_or(0) > 0, "{run:?}");
        let desc = w.check(&run.locals, &run.snapshot).unwrap();
        assert!(desc.contains("money_conservation"), "{desc}");
        let local_commits: u64 = run.locals.iter().flat_map(|l| l.committed().iter()).sum();
        assert_eq!(local_commits, run.committed.iter().sum::<u64>());
    }
}
