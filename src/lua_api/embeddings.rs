//! `Embeddings`: a validated table (N, D, f32 rows, inv_norm, sha256) in
//! native memory.

use std::sync::Arc;

use mlua::{UserData, UserDataFields, UserDataMethods, UserDataRef};

use super::arrays::HostArray;
use crate::contract::{fp16, gram, table::Table};
use crate::error::Error;

pub struct Embeddings(pub Arc<Table>);

impl UserData for Embeddings {
    fn add_fields<F: UserDataFields<Self>>(f: &mut F) {
        f.add_field_method_get("n", |_, this| Ok(this.0.n));
        f.add_field_method_get("dim", |_, this| Ok(this.0.dim));
        f.add_field_method_get("sha256", |_, this| Ok(this.0.sha256.clone()));
        f.add_field_method_get("path", |_, this| Ok(this.0.path.clone()));
        f.add_field_method_get("model", |_, this| Ok(this.0.model.clone()));
    }

    fn add_methods<M: UserDataMethods<Self>>(m: &mut M) {
        m.add_method("values", |_, this, ()| Ok(HostArray::F32(this.0.data.clone())));
        m.add_method("inv_norms", |_, this, ()| Ok(HostArray::F32(this.0.inv_norm.clone())));
        m.add_method("to_fp16", |_, this, ()| Ok(HostArray::U16(fp16::to_fp16(&this.0)?)));
        // The table E' = (f32)E16 that the `fp16` contract runs on.
        m.add_method("fp16_rounded", |_, this, ()| {
            let halves = fp16::to_fp16(&this.0)?;
            let t = fp16::widen(&this.0.path, this.0.n, this.0.dim, &halves, this.0.sha256.clone())?;
            Ok(Embeddings(Arc::new(t)))
        });
        // Rows of `starts` widened to f64: the initial centroid sums of a batch.
        m.add_method("gather_f64", |_, this, starts: UserDataRef<HostArray>| {
            let t = &this.0;
            let starts = starts.as_u32("starts")?;
            let mut out = Vec::with_capacity(starts.len() * t.dim);
            for &s in starts {
                if s as usize >= t.n {
                    return Err(Error::Usage(format!("start {s} is out of range: items are 0..{}", t.n)).into());
                }
                out.extend(t.row(s as usize).iter().map(|&x| x as f64));
            }
            Ok(HostArray::F64(out))
        });
        // Upper bounds on every row's 2-norm (f64), for the Gram filter's bound.
        m.add_method("norm_bounds", |_, this, ()| Ok(HostArray::F64(gram::row_norm_bounds(&this.0))));
        // true, or nil and why the Gram method cannot certify this table.
        m.add_method("gram_admissible", |_, this, ()| {
            Ok(match gram::check_admissible(&this.0, &gram::row_norm_bounds(&this.0)) {
                Ok(()) => (true, None),
                Err(why) => (false, Some(why)),
            })
        });
        // e:subnormal_certificate() -> true | false, why: no f32 value of the
        // contract's chain can be subnormal (contract/subnormal.rs)
        m.add_method("subnormal_certificate", |_, this, ()| {
            Ok(match crate::contract::subnormal::check(&this.0) {
                Ok(()) => (true, None),
                Err(why) => (false, Some(why)),
            })
        });
        m.add_method("title", |_, this, i: usize| {
            Ok(this.0.titles.as_ref().and_then(|t| t.get(i).cloned()))
        });
        m.add_method("id", |_, this, i: usize| Ok(this.0.ids.as_ref().and_then(|t| t.get(i).cloned())));
        m.add_method("write_json", |_, this, path: String| Ok(this.0.write_json(&path)?));
        // e:write(path): .npy (and its titles sidecar) or .json, by the name.
        m.add_method("write", |_, this, path: String| Ok(crate::contract::table_file::write(&this.0, &path)?));
        m.add_meta_method(mlua::MetaMethod::ToString, |_, this, ()| {
            Ok(format!("divgpu.embeddings<{}×{} from {}>", this.0.n, this.0.dim, this.0.path))
        });
    }
}
