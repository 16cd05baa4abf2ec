//! `NativeCore`'s arguments: the configuration it is built with (`build_core`), and the
//! shapes of the state it loads and exports.

use std::collections::{BTreeMap, HashMap};

use ed25519_dalek::SigningKey;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::core::{
    AuditChain, AuditKey, CheckpointChain, Config, Core, KeyedHasher, Map, RoleKind, SealKey,
    Session, State,
};
use crate::hashing::{self, AuditMac};
use crate::merkle::Frontier;
use crate::schemas::NATIVE_SCHEMAS;
use crate::text::repr_ascii;
use crate::tlog::{is_valid_log_name, LOG_NAME_RULE, MAX_LOG_EPOCH};
use crate::undo::UndoLog;

pub(super) type SessionTuple = (String, i128, String, bool);
/// A key of a ring: (seed or secret, key id, valid_from_ms, valid_until_ms).
pub(super) type KeyEntry = (Vec<u8>, String, i64, Option<i64>);
/// A registered producer: (name, roles, [(key id, raw public key, valid_from_ms, valid_until_ms)],
/// run prefixes, collaborators, max open runs).
pub(super) type ProducerEntry = (
    String,
    Vec<String>,
    Vec<(String, Vec<u8>, i64, Option<i64>)>,
    Vec<String>,
    Vec<String>,
    i64,
);
pub(super) type RunHeader = (String, i64, bool, i64, Vec<SessionTuple>, String);

pub(super) fn value_error(message: String) -> PyErr {
    PyValueError::new_err(message)
}

pub(super) fn sessions_from(items: Vec<SessionTuple>) -> Vec<(String, Session)> {
    items
        .into_iter()
        .map(|(id, next_index, last_anchor, closed)| {
            (
                id,
                Session {
                    next_index,
                    last_anchor,
                    closed,
                },
            )
        })
        .collect()
}

pub(super) fn sessions_to(sessions: &[(String, Session)]) -> Vec<SessionTuple> {
    sessions
        .iter()
        .map(|(id, s)| (id.clone(), s.next_index, s.last_anchor.clone(), s.closed))
        .collect()
}

pub(super) fn str_map(
    dict: &Bound<'_, PyAny>,
    hasher: KeyedHasher,
    what: &str,
) -> PyResult<Map<Box<str>, Box<str>>> {
    let dict = dict
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a dict")))?;
    let mut map = Map::with_capacity_and_hasher(dict.len(), hasher);
    for (k, v) in dict.iter() {
        let k: String = k.extract()?;
        let v: String = v.extract()?;
        map.insert(k.into_boxed_str(), v.into_boxed_str());
    }
    Ok(map)
}

pub(super) fn map_to_dict<'py>(
    py: Python<'py>,
    map: &Map<Box<str>, Box<str>>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (k, v) in map {
        dict.set_item(&**k, &**v)?;
    }
    Ok(dict)
}

/// `step._check_partitions`: a partition count is at least 1.
pub(super) fn check_partitions(partitions: Option<i64>) -> PyResult<()> {
    match partitions {
        Some(n) if n < 1 => Err(value_error(format!(
            "submission_partitions must be None or at least 1, not {n}"
        ))),
        _ => Ok(()),
    }
}

/// The core `NativeCore.__new__` describes (see there), its state `initial_state(config, partition)`.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_core(
    roles: &Bound<'_, PyDict>,
    signing_seed: &[u8],
    audit_key: &[u8],
    audit_key_id: String,
    seal_every: i64,
    partition: i64,
    signer_key_id: String,
    known_schemas: Vec<(Vec<u8>, String)>,
    input_schemas: Vec<String>,
    max_output_bytes: usize,
    checkpoint_every: i64,
    accept_undeclared_sizes: bool,
    seal_keys: Vec<KeyEntry>,
    audit_keys: Vec<KeyEntry>,
    producers: Vec<ProducerEntry>,
    submission_partitions: Option<i64>,
    log_name: String,
    log_epoch: i64,
) -> PyResult<Core> {
    let seed: [u8; 32] = signing_seed.try_into().map_err(|_| {
        value_error(format!(
            "an Ed25519 seed has 32 bytes, got {}",
            signing_seed.len()
        ))
    })?;
    if seal_every < 1 {
        return Err(value_error("seal_every must be at least 1".into()));
    }
    if !(1..=1000).contains(&checkpoint_every) {
        return Err(value_error("checkpoint_every must be 1 to 1000".into()));
    }
    check_partitions(submission_partitions)?;
    if !is_valid_log_name(&log_name) {
        return Err(value_error(format!(
            "log name {}: {LOG_NAME_RULE}",
            repr_ascii(&log_name).unwrap_or_else(|| format!("'{log_name}'"))
        )));
    }
    if !(1..=MAX_LOG_EPOCH).contains(&log_epoch) {
        return Err(value_error(format!(
            "log epoch {log_epoch}: a whole number from 1 to {MAX_LOG_EPOCH}"
        )));
    }
    if max_output_bytes < 64 * 1024 {
        return Err(value_error(
            "max_output_bytes must be at least 65536".into(),
        ));
    }
    let partition = i32::try_from(partition)
        .map_err(|_| value_error(format!("partition {partition} does not fit an Avro int")))?;
    let mut known = Vec::with_capacity(known_schemas.len());
    for (fp, name) in known_schemas {
        let fp: [u8; 8] = fp
            .as_slice()
            .try_into()
            .map_err(|_| value_error(format!("fingerprint of {name} is not 8 bytes")))?;
        known.push((fp, name));
    }
    for (name, fp) in NATIVE_SCHEMAS {
        match known.iter().find(|(_, n)| n == name) {
            Some((f, _)) if *f == fp => {}
            Some((f, _)) => {
                return Err(value_error(format!(
                    "schema {name} has fingerprint {} in the codec but {} in bernstein_native: the native encoders need updating",
                    hashing::hex_string(f),
                    hashing::hex_string(&fp)
                )))
            }
            None => return Err(value_error(format!("the codec has no schema {name}"))),
        }
    }
    let mut sorted_inputs = input_schemas.clone();
    sorted_inputs.sort();
    let audit = AuditMac::new(audit_key);
    let hasher = KeyedHasher::from_seed(audit.raw(b"bernstein/native-table-keys/v1"));
    let mut role_map = HashMap::with_hasher(hasher);
    for (k, v) in roles.iter() {
        let k = k
            .cast_into::<PyString>()
            .map_err(|_| PyTypeError::new_err("roles must map str to str"))?;
        if v.is_none() {
            continue; // config.roles.get(role) is None: an unknown role
        }
        let repr = v.repr()?.to_str()?.to_owned();
        let (text, clip_source) = match v.cast::<PyString>() {
            Ok(s) => {
                let s = s.to_str()?.to_owned();
                (Some(s.clone()), s)
            }
            Err(_) => (None, repr.clone()),
        };
        role_map.insert(
            k.to_str()?.to_owned(),
            RoleKind {
                text,
                clip_source,
                repr,
            },
        );
    }
    let seal_ring = if seal_keys.is_empty() {
        vec![SealKey {
            signing_key: SigningKey::from_bytes(&seed),
            key_id: signer_key_id,
            valid_from_ms: 0,
            valid_until_ms: None,
        }]
    } else {
        seal_keys
            .into_iter()
            .map(|(seed, key_id, from, until)| {
                let seed: [u8; 32] = seed.as_slice().try_into().map_err(|_| {
                    value_error(format!("the seed of seal key {key_id} is not 32 bytes"))
                })?;
                Ok(SealKey {
                    signing_key: SigningKey::from_bytes(&seed),
                    key_id,
                    valid_from_ms: from,
                    valid_until_ms: until,
                })
            })
            .collect::<PyResult<Vec<_>>>()?
    };
    let audit_ring = if audit_keys.is_empty() {
        vec![AuditKey {
            mac: audit.clone(),
            key_id: audit_key_id,
            valid_from_ms: 0,
            valid_until_ms: None,
        }]
    } else {
        audit_keys
            .into_iter()
            .map(|(secret, key_id, from, until)| AuditKey {
                mac: AuditMac::new(&secret),
                key_id,
                valid_from_ms: from,
                valid_until_ms: until,
            })
            .collect()
    };
    let mut registered = Vec::with_capacity(producers.len());
    let mut producer_keys = HashMap::with_hasher(hasher);
    for (index, (name, mut granted, keys, run_prefixes, collaborators, max_open_runs)) in
        producers.into_iter().enumerate()
    {
        granted.sort();
        for (key_id, public, from, until) in keys {
            let key = crate::ed25519::PublicKey::from_bytes(public.as_slice());
            let entry = crate::producers::ProducerKey {
                producer: index,
                key,
                valid_from_ms: from,
                valid_until_ms: until,
            };
            if producer_keys.insert(key_id.clone(), entry).is_some() {
                return Err(value_error(format!("key {key_id} is registered twice")));
            }
        }
        registered.push(crate::producers::Producer {
            name,
            roles: granted,
            run_prefixes,
            collaborators,
            max_open_runs,
        });
    }
    let cfg = Config {
        roles: role_map,
        seal_keys: seal_ring,
        audit,
        audit_keys: audit_ring,
        producers: registered,
        producer_keys,
        seal_every,
        checkpoint_every,
        max_output_bytes,
        accept_undeclared_sizes,
        submission_partitions,
        log_name,
        log_epoch,
        known,
        expected: input_schemas,
        expected_joined: sorted_inputs.join(", "),
        hasher,
        keep_log: true,
    };
    let state = State {
        partition,
        audit: AuditChain {
            seq: 0,
            head: String::new(),
        },
        runs: Map::with_hasher(hasher),
        checkpoint: CheckpointChain::genesis(partition),
        open_runs: BTreeMap::new(),
        tree: Frontier::new(),
    };
    let mut core = Core {
        cfg,
        state,
        final_sealed: false,
        presigned: HashMap::with_hasher(hasher),
        undo: UndoLog::default(),
    };
    core.reset(partition);
    Ok(core)
}
