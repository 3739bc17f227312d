//! Removes the branches that the resolved override constants make dead, before SPIR-V is
//! written. A kernel selects its variant with `if (KV_DTYPE == 2u) { ... }`-style tests on
//! overrides; naga folds those conditions to constants but keeps both branches, so the entry
//! point still references every workgroup array of every variant — and the NVIDIA driver sizes
//! a kernel's shared memory from what its code references, dead or not (a dead rotated-key branch
//! once cost the 8B decode attention 30% at depth 32k). Dropping the branches lets the SPIR-V
//! writer omit the arrays only dead code touched.

use std::collections::HashSet;

use naga::{Block, Expression, Function, Handle, Literal, Module, Statement};

/// Replaces every `if` whose condition is a constant by the branch it takes, in every function
/// of `module`, then drops what only the removed branches used (their `let` names, expressions,
/// and functions nothing calls any more). Returns how many were replaced.
pub(crate) fn prune_constant_branches(module: &mut Module) -> usize {
    let n = prune_ifs(module);
    if n > 0 {
        naga::compact::compact(module, naga::compact::KeepUnused::No);
    }
    n
}

fn prune_ifs(module: &mut Module) -> usize {
    let mut n = 0;
    let constants = &module.constants;
    let global = &module.global_expressions;
    let lookup = |f: &Function, h| match f.expressions[h] {
        Expression::Literal(Literal::Bool(b)) => Some(b),
        Expression::Constant(c) => match global[constants[c].init] {
            Expression::Literal(Literal::Bool(b)) => Some(b),
            _ => None,
        },
        _ => None,
    };
    let functions = module.functions.iter_mut().map(|(_, f)| f);
    for f in functions.chain(module.entry_points.iter_mut().map(|ep| &mut ep.function)) {
        let mut body = core::mem::take(&mut f.body);
        let mut gone = HashSet::new();
        n += prune_block(&mut body, &|h| lookup(f, h), &mut gone);
        f.body = body;
        // A `let` of a removed branch would keep its expression (and a call's result, which
        // no statement produces any more) alive through compaction.
        f.named_expressions.retain(|h, _| !gone.contains(h));
    }
    n
}

/// Prunes `block` (recursively); `gone` collects the expressions the removed branches defined.
fn prune_block(
    block: &mut Block,
    cond: &dyn Fn(Handle<Expression>) -> Option<bool>,
    gone: &mut HashSet<Handle<Expression>>,
) -> usize {
    let mut n = 0;
    for s in block.iter_mut() {
        if let Statement::If {
            condition,
            accept,
            reject,
        } = s
            && let Some(taken) = cond(*condition)
        {
            let (kept, dropped) = if taken {
                (accept, reject)
            } else {
                (reject, accept)
            };
            defined(dropped, gone);
            *s = Statement::Block(core::mem::take(kept));
            n += 1;
        }
        n += match s {
            Statement::Block(b) => prune_block(b, cond, gone),
            Statement::If { accept, reject, .. } => {
                prune_block(accept, cond, gone) + prune_block(reject, cond, gone)
            }
            Statement::Switch { cases, .. } => cases
                .iter_mut()
                .map(|c| prune_block(&mut c.body, cond, gone))
                .sum(),
            Statement::Loop {
                body, continuing, ..
            } => prune_block(body, cond, gone) + prune_block(continuing, cond, gone),
            _ => 0,
        };
    }
    n
}

/// Every expression `block` emits or whose value one of its statements produces.
fn defined(block: &Block, out: &mut HashSet<Handle<Expression>>) {
    for s in block.iter() {
        match s {
            Statement::Emit(r) => out.extend(r.clone()),
            Statement::Call {
                result: Some(h), ..
            }
            | Statement::Atomic {
                result: Some(h), ..
            }
            | Statement::WorkGroupUniformLoad { result: h, .. }
            | Statement::SubgroupBallot { result: h, .. }
            | Statement::SubgroupGather { result: h, .. }
            | Statement::SubgroupCollectiveOperation { result: h, .. } => {
                out.insert(*h);
            }
            Statement::Block(b) => defined(b, out),
            Statement::If { accept, reject, .. } => {
                defined(accept, out);
                defined(reject, out);
            }
            Statement::Switch { cases, .. } => cases.iter().for_each(|c| defined(&c.body, out)),
            Statement::Loop {
                body, continuing, ..
            } => {
                defined(body, out);
                defined(continuing, out);
            }
            _ => {}
        }
    }
}
