//! Token embedding lookup: copies row `id` of a `[vocab, dim]` table for each id.

use crate::CpuError;

/// `out[t] = table[ids[t]]` with `table: [vocab, dim]`, `out: [ids.len(), dim]`.
///
/// Every id is checked before anything is written: on error `out` is untouched.
///
/// # Errors
/// [`CpuError::TokenOutOfRange`] if an id is `>= vocab`.
///
/// # Panics
/// If `dim == 0`, `table.len()` is not a multiple of `dim`, or `out.len() != ids.len() * dim`
/// (programming errors).
pub fn embedding(table: &[f32], dim: usize, ids: &[u32], out: &mut [f32]) -> Result<(), CpuError> {
    assert!(dim > 0, "embedding: dim is 0");
    assert_eq!(table.len() % dim, 0, "embedding: table is not [vocab, dim]");
    assert_eq!(
        out.len(),
        ids.len() * dim,
        "embedding: out is not [ids, dim]"
    );
    let vocab = table.len() / dim;
    if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(CpuError::TokenOutOfRange { id, vocab });
    }
    for (o, &id) in out.chunks_exact_mut(dim).zip(ids) {
        let r = id as usize;
        o.copy_from_slice(&table[r * dim..(r + 1) * dim]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_rows() {
        let table = [0.0, 1.0, 10.0, 11.0, 20.0, 21.0];
        let mut out = [f32::NAN; 6];
        embedding(&table, 2, &[2, 0, 2], &mut out).unwrap();
        assert_eq!(out, [20.0, 21.0, 0.0, 1.0, 20.0, 21.0]);
    }

    #[test]
    fn out_of_range_is_a_typed_error_and_writes_nothing() {
        let table = [0.0; 6];
        let mut out = [7.0; 4];
        let err = embedding(&table, 2, &[1, 3], &mut out).unwrap_err();
        assert_eq!(err, CpuError::TokenOutOfRange { id: 3, vocab: 3 });
        assert_eq!(out, [7.0; 4]);
        assert!(err.to_string().contains("token id 3"));
    }
}
