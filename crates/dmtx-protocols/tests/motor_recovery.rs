//! Motor's recovery hooks (issue 28 item 10, §5.3): every lock word holds its owner, and
//! each coordinator's operation log names the keys its transaction locks, so a
//! recovering coordinator releases exactly the dead one's locks with `CAS(owner → 0)`.

use dmtx_protocols::motor::oplog::LogState;
use dmtx_protocols::motor::Motor;
use dmtx_runtime::{block_on, Knobs, Protocol, TxnHints};
use dmtx_suite::{bank, Env, Setup};
use dmtx_verbs::Post;

/// Goal: a coordinator that stops while holding locks leaves a log naming them, with
/// its owner in each lock word; the log's release, posted by another coordinator, frees
/// them, and a lock it never held is left alone.
#[test]
fn the_operation_log_names_the_locks_and_releases_them() {
    let env = Env::bank(Motor::from_knobs(&Knobs::default()).unwrap(), Setup::new(2, 20));
    let slots = env.slots(bank::TABLE.id());
    let catalog = env.catalog();
    let info = catalog.get(bank::TABLE.id()).unwrap().clone();
    let lock_word = |key: u64| {
        let p = info.ptr(0, slots[&key]);
        let mut w = [0u8; 8];
        env.region(p.mn).read(p.offset, &mut w).unwrap();
        u64::from_le_bytes(w)
    };
    let w = env.mem_cn(0).worker(0).expect("worker");
    let mut dead = w.coordinator(&env.proto, 0).expect("coordinator");
    let mut rescuer = w.coordinator(&env.proto, 1).expect("coordinator");
    let mut other = w.coordinator(&env.proto, 2).expect("coordinator");
    block_on(async {
        // Another coordinator's lock on key 3, which the release must not touch.
        let mut t3 = other.begin_with(TxnHints::DECLARED);
        t3.add_rw(bank::TABLE, 3);
        t3.execute().await.unwrap();

        let mut t = dead.begin_with(TxnHints::DECLARED);
        t.add_rw(bank::TABLE, 1);
        t.add_rw(bank::TABLE, 2);
        t.add_ro(bank::TABLE, 5);
        t.execute().await.unwrap();
        let owner = t.coord.state.owner();
        let log = t.coord.state.oplog().clone();
        assert_eq!(log.state(), LogState::Locking);
        let mut keys: Vec<u64> = log.keys().iter().map(|k| k.1).collect();
        keys.sort();
        assert_eq!(keys, [1, 2], "the locked keys, not the read-only one");
        assert_eq!((lock_word(1), lock_word(2)), (owner, owner));

        let mut post = Post::new();
        log.release(&mut post, &catalog, owner, |_, k| slots.get(&k).copied());
        rescuer.ctx.post(&mut post).await.unwrap();
        assert_eq!((lock_word(1), lock_word(2)), (0, 0));
        assert_ne!(lock_word(3), 0, "another owner's lock stays");
        drop(t);
        drop(t3);
    });
}
