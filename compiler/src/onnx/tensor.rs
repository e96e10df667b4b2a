//! ONNX element types and tensor data: `TensorProto` to IR [`Tensor`], from
//! `raw_data` (little-endian) or the typed fields.

use super::ImportError;
use super::proto::TensorProto;
use super::proto::tensor_proto::{DataLocation, DataType};
use crate::ir::{ElemType, Tensor, TensorType};

/// The largest number of elements a tensor type may describe. Keeps every
/// product of dimensions in range; no model comes near it.
pub const MAX_ELEMENTS: usize = 1 << 40;

/// The largest constant the importer computes (`ConstantOfShape`, `Expand`'s
/// zeros, a folded node): 2^26 elements, 512 MiB as the IR holds them.
pub const MAX_CONSTANT_ELEMENTS: usize = 1 << 26;

/// The IR element type of an ONNX data type, if the IR has it.
pub fn elem_type(data_type: i32) -> Option<ElemType> {
    Some(match DataType::try_from(data_type).ok()? {
        DataType::Float => ElemType::F32,
        DataType::Double => ElemType::F64,
        DataType::Float16 => ElemType::F16,
        DataType::Bfloat16 => ElemType::Bf16,
        DataType::Int8 => ElemType::I8,
        DataType::Uint8 => ElemType::U8,
        DataType::Int32 => ElemType::I32,
        DataType::Int64 => ElemType::I64,
        DataType::Bool => ElemType::Bool,
        _ => return None,
    })
}

/// The ONNX data type of an IR element type.
pub fn data_type(elem: ElemType) -> DataType {
    match elem {
        ElemType::F32 => DataType::Float,
        ElemType::F64 => DataType::Double,
        ElemType::F16 => DataType::Float16,
        ElemType::Bf16 => DataType::Bfloat16,
        ElemType::I8 => DataType::Int8,
        ElemType::U8 => DataType::Uint8,
        ElemType::I32 => DataType::Int32,
        ElemType::I64 => DataType::Int64,
        ElemType::Bool => DataType::Bool,
    }
}

/// A data type for messages: `FLOAT`, `COMPLEX64`, or the number when unknown.
pub fn data_type_name(data_type: i32) -> String {
    match DataType::try_from(data_type) {
        Ok(d) => d.name().to_owned(),
        Err(_) => format!("data type {data_type}"),
    }
}

/// The element count of a shape, if within [`MAX_ELEMENTS`] (zero-sized
/// dimensions count as 1 for the bound, so every partial product is in range too).
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    let mut bound = 1usize;
    for d in shape {
        bound = bound.checked_mul((*d).max(1))?;
        if bound > MAX_ELEMENTS {
            return None;
        }
    }
    Some(shape.iter().product())
}

/// Converts ONNX dimensions to a shape, refusing negative ones and sizes past [`MAX_ELEMENTS`].
pub fn shape_of(dims: &[i64]) -> Result<Vec<usize>, String> {
    let shape = dims
        .iter()
        .map(|d| usize::try_from(*d).map_err(|_| format!("negative dimension {d} in {dims:?}")))
        .collect::<Result<Vec<_>, _>>()?;
    match checked_numel(&shape) {
        Some(_) => Ok(shape),
        None => Err(format!(
            "shape {dims:?} has more than {MAX_ELEMENTS} elements"
        )),
    }
}

/// Decodes a tensor: its type from `data_type` and `dims`, its elements from
/// `raw_data` when present, else from the typed field of its type.
pub fn tensor_from_proto(t: &TensorProto) -> Result<Tensor, ImportError> {
    let err = |message: String| ImportError::Tensor {
        name: t.name.clone(),
        message,
    };
    check_location(t).map_err(err)?;
    let elem = elem_type(t.data_type).ok_or_else(|| {
        err(format!(
            "unsupported element type {}",
            data_type_name(t.data_type)
        ))
    })?;
    let shape = shape_of(&t.dims).map_err(err)?;
    let numel: usize = shape.iter().product();
    if elem == ElemType::F32 && numel > 0 && t.raw_data.len() == 4 * numel {
        // Kept as the file's bytes (weights are read once, by packing).
        return Ok(Tensor::f32_bytes(shape, t.raw_data.clone()));
    }
    let data = if t.raw_data.is_empty() {
        typed_data(t, elem, numel)
    } else {
        raw_data(&t.raw_data, elem, numel)
    }
    .map_err(err)?;
    Ok(Tensor::new(TensorType { elem, shape }, data))
}

fn check_location(t: &TensorProto) -> Result<(), String> {
    if t.data_location == DataLocation::External as i32 || !t.external_data.is_empty() {
        return Err("external data is not supported (save the model with its data inside)".into());
    }
    if t.segment.is_some() {
        return Err("segmented tensors are not supported".into());
    }
    Ok(())
}

fn count_check(have: usize, numel: usize, field: &str) -> Result<(), String> {
    if have == numel {
        Ok(())
    } else {
        Err(format!("{numel} elements expected, `{field}` holds {have}"))
    }
}

/// Elements from the typed field the type uses.
fn typed_data(t: &TensorProto, elem: ElemType, numel: usize) -> Result<Vec<f64>, String> {
    let (len, field) = match elem {
        ElemType::F32 => (t.float_data.len(), "float_data"),
        ElemType::F64 => (t.double_data.len(), "double_data"),
        ElemType::I64 => (t.int64_data.len(), "int64_data"),
        _ => (t.int32_data.len(), "int32_data"),
    };
    count_check(len, numel, field)?;
    Ok(match elem {
        ElemType::F32 => t.float_data.iter().map(|x| f64::from(*x)).collect(),
        ElemType::F64 => t.double_data.clone(),
        ElemType::I64 => t.int64_data.iter().map(|x| *x as f64).collect(),
        ElemType::F16 => int32_bits(&t.int32_data, |b| half::f16::from_bits(b).to_f64()),
        ElemType::Bf16 => int32_bits(&t.int32_data, |b| half::bf16::from_bits(b).to_f64()),
        ElemType::I8 | ElemType::U8 | ElemType::I32 | ElemType::Bool => {
            t.int32_data.iter().map(|x| f64::from(*x)).collect()
        }
    })
}

/// 16-bit float bit patterns held in the low half of `int32_data` entries.
fn int32_bits(data: &[i32], f: impl Fn(u16) -> f64) -> Vec<f64> {
    data.iter().map(|x| f((*x & 0xffff) as u16)).collect()
}

/// The size of one element in `raw_data`.
fn raw_size(elem: ElemType) -> usize {
    match elem {
        ElemType::I8 | ElemType::U8 | ElemType::Bool => 1,
        ElemType::F16 | ElemType::Bf16 => 2,
        ElemType::F32 | ElemType::I32 => 4,
        ElemType::F64 | ElemType::I64 => 8,
    }
}

/// Fixed-width little-endian chunks.
fn chunks<const N: usize>(raw: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    raw.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        a
    })
}

/// Elements from little-endian `raw_data`.
fn raw_data(raw: &[u8], elem: ElemType, numel: usize) -> Result<Vec<f64>, String> {
    let size = raw_size(elem);
    if numel.checked_mul(size) != Some(raw.len()) {
        return Err(format!(
            "{numel} elements of {} expected ({} bytes), `raw_data` holds {} bytes",
            elem.name(),
            numel.saturating_mul(size),
            raw.len()
        ));
    }
    Ok(match elem {
        ElemType::F32 => chunks(raw)
            .map(|b| f64::from(f32::from_le_bytes(b)))
            .collect(),
        ElemType::F64 => chunks(raw).map(f64::from_le_bytes).collect(),
        ElemType::F16 => chunks(raw)
            .map(|b| half::f16::from_le_bytes(b).to_f64())
            .collect(),
        ElemType::Bf16 => chunks(raw)
            .map(|b| half::bf16::from_le_bytes(b).to_f64())
            .collect(),
        ElemType::I8 => raw.iter().map(|b| f64::from(*b as i8)).collect(),
        ElemType::U8 => raw.iter().map(|b| f64::from(*b)).collect(),
        ElemType::Bool => raw.iter().map(|b| f64::from(u8::from(*b != 0))).collect(),
        ElemType::I32 => chunks(raw)
            .map(|b| f64::from(i32::from_le_bytes(b)))
            .collect(),
        ElemType::I64 => chunks(raw).map(|b| i64::from_le_bytes(b) as f64).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(elem: ElemType, dims: &[i64], bytes: Vec<u8>) -> Result<Tensor, ImportError> {
        tensor_from_proto(&TensorProto::from_raw("t", data_type(elem), dims, bytes))
    }

    #[test]
    fn every_supported_type_round_trips_through_its_data_type() {
        for e in [
            ElemType::F32,
            ElemType::F16,
            ElemType::Bf16,
            ElemType::F64,
            ElemType::I8,
            ElemType::U8,
            ElemType::I32,
            ElemType::I64,
            ElemType::Bool,
        ] {
            assert_eq!(elem_type(data_type(e) as i32), Some(e));
        }
        assert_eq!(elem_type(DataType::Complex64 as i32), None);
        assert_eq!(elem_type(99), None);
        assert_eq!(data_type_name(99), "data type 99");
    }

    #[test]
    fn raw_data_is_little_endian() {
        let t = raw(
            ElemType::I32,
            &[2],
            vec![1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        )
        .expect("ok");
        assert_eq!(*t.data, [1.0, -1.0]);
        let t = raw(ElemType::F16, &[1], 0x3c00u16.to_le_bytes().to_vec()).expect("ok");
        assert_eq!(*t.data, [1.0]);
        let t = raw(ElemType::Bool, &[3], vec![0, 1, 7]).expect("ok");
        assert_eq!(*t.data, [0.0, 1.0, 1.0]);
    }

    #[test]
    fn wrong_sizes_are_errors() {
        let e = raw(ElemType::F32, &[2], vec![0; 7]).expect_err("short");
        assert!(e.to_string().contains("holds 7 bytes"), "{e}");
        let e = raw(ElemType::F32, &[-1], vec![]).expect_err("negative");
        assert!(e.to_string().contains("negative dimension"), "{e}");
        let e = raw(ElemType::U8, &[1 << 30, 1 << 30, 0], vec![]).expect_err("huge");
        assert!(e.to_string().contains("more than"), "{e}");
        let e = tensor_from_proto(&TensorProto::from_f32("w", &[3], &[1.0])).expect_err("count");
        assert_eq!(
            e.to_string(),
            "tensor `w`: 3 elements expected, `float_data` holds 1"
        );
    }

    #[test]
    fn shape_bound_counts_zero_sized_dimensions_as_one() {
        assert_eq!(checked_numel(&[0, 4]), Some(0));
        assert_eq!(checked_numel(&[]), Some(1));
        assert_eq!(checked_numel(&[usize::MAX, 0]), None);
    }
}
