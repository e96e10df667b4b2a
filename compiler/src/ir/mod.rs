//! The graph IR: a model after import — values with static shapes and element
//! types, nodes in topological order, constants — and the rules every op obeys
//! (shape and type inference), which the importer uses to type the graph and
//! the verifier uses to check it after every pass.

mod infer;
mod print;
mod verify;

pub use infer::{broadcast, infer};
pub use verify::verify;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A value (a tensor produced by a node, a graph input or a constant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    /// The id as an index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Whether a permutation swaps the last two dimensions and keeps the others.
pub fn swaps_last_two(perm: &[usize]) -> bool {
    let r = perm.len();
    r >= 2
        && perm[..r - 2].iter().enumerate().all(|(i, p)| i == *p)
        && perm[r - 2] == r - 1
        && perm[r - 1] == r - 2
}

/// Element types of model tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    Bf16,
    /// 64-bit float.
    F64,
    /// 8-bit signed integer.
    I8,
    /// 8-bit unsigned integer.
    U8,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// Boolean.
    Bool,
}

impl ElemType {
    /// The ONNX name.
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "float",
            ElemType::F16 => "float16",
            ElemType::Bf16 => "bfloat16",
            ElemType::F64 => "double",
            ElemType::I8 => "int8",
            ElemType::U8 => "uint8",
            ElemType::I32 => "int32",
            ElemType::I64 => "int64",
            ElemType::Bool => "bool",
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElemType::F32 | ElemType::F16 | ElemType::Bf16 | ElemType::F64
        )
    }

    /// Rounds a value to this type: floats to nearest even, integers with
    /// truncation toward zero and wrap-around (as ONNX casts of out-of-range values), bools to 0/1.
    pub fn round(self, x: f64) -> f64 {
        let wrap = |bits: i32, signed: bool| {
            if !x.is_finite() {
                return 0.0;
            }
            let modulus = 2f64.powi(bits);
            let mut r = x.trunc().rem_euclid(modulus);
            if signed && r >= modulus / 2.0 {
                r -= modulus;
            }
            r
        };
        match self {
            ElemType::F32 => f64::from(x as f32),
            ElemType::F16 => f64::from(isa_specs::dtype::f16_from_f64(x).to_f32()),
            ElemType::Bf16 => f64::from(isa_specs::dtype::bf16_from_f64(x).to_f32()),
            ElemType::F64 => x,
            ElemType::I8 => wrap(8, true),
            ElemType::U8 => wrap(8, false),
            ElemType::I32 => wrap(32, true),
            ElemType::I64 => x.trunc(),
            ElemType::Bool => f64::from(u8::from(x != 0.0)),
        }
    }
}

/// A static tensor type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub elem: ElemType,
    /// Dimensions (row-major).
    pub shape: Vec<usize>,
}

impl TensorType {
    /// Number of elements (`usize::MAX` if that overflows, which no valid tensor does).
    pub fn numel(&self) -> usize {
        self.shape
            .iter()
            .try_fold(1usize, |a, d| a.checked_mul(*d))
            .unwrap_or(usize::MAX)
    }
}

impl std::fmt::Display for TensorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(usize::to_string).collect();
        write!(f, "{}[{}]", self.elem.name(), dims.join(", "))
    }
}

/// A tensor with its data. Values are held as `f64`, each already rounded to
/// the element type (exact for every type here, and for `int64` up to 2^53).
/// The elements are shared: cloning a tensor (or a graph's constants) does
/// not copy them.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Type.
    pub ty: TensorType,
    /// Elements, row-major.
    pub data: Data,
}

impl Tensor {
    /// A tensor, rounding every element to the type.
    pub fn new(ty: TensorType, mut data: Vec<f64>) -> Tensor {
        for x in &mut data {
            *x = ty.elem.round(*x);
        }
        Tensor {
            ty,
            data: data.into(),
        }
    }

    /// An `f32` tensor of little-endian bytes (`4 · numel` of them), kept as
    /// they are until its values are first asked for as `f64`s.
    pub fn f32_bytes(shape: Vec<usize>, bytes: prost::bytes::Bytes) -> Tensor {
        let len = bytes.len() / 4;
        Tensor {
            ty: TensorType {
                elem: ElemType::F32,
                shape,
            },
            data: Data(Arc::new(Elements {
                f32_bytes: Some(bytes),
                len,
                values: std::sync::OnceLock::new(),
            })),
        }
    }
}

/// A tensor's elements: a shared slice of `f64` ([`std::ops::Deref`]).
/// Weights imported from a model file stay the file's `f32` bytes until a
/// pass asks for them as a slice: [`Data::at`], [`Data::read`] and
/// [`Data::len`] read them without converting the whole tensor (packing a
/// model's weights for the machine reads each once).
#[derive(Clone)]
pub struct Data(Arc<Elements>);

struct Elements {
    f32_bytes: Option<prost::bytes::Bytes>,
    len: usize,
    values: std::sync::OnceLock<Vec<f64>>,
}

impl Data {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.0.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }

    /// Whether the values are held as `f64`s (always, unless the tensor was
    /// made from `f32` bytes and nothing has asked for its slice yet).
    pub fn is_decoded(&self) -> bool {
        self.0.values.get().is_some()
    }

    /// Element `i` (panics beyond the end, as indexing does).
    pub fn at(&self, i: usize) -> f64 {
        match (&self.0.f32_bytes, self.0.values.get()) {
            (_, Some(v)) => v[i],
            (Some(b), None) => {
                let w = b[4 * i..4 * i + 4].try_into().unwrap_or([0; 4]);
                f64::from(f32::from_le_bytes(w))
            }
            (None, None) => unreachable!("values or bytes"),
        }
    }

    /// The little-endian `f32` bytes the elements are held as, unless they
    /// are held as `f64`s ([`Data::is_decoded`]).
    pub fn f32_bytes(&self) -> Option<&[u8]> {
        match (&self.0.f32_bytes, self.0.values.get()) {
            (Some(b), None) => Some(b),
            _ => None,
        }
    }

    /// Elements `start..start + out.len()` into `out`.
    pub fn read(&self, start: usize, out: &mut [f64]) {
        match (&self.0.f32_bytes, self.0.values.get()) {
            (Some(b), None) => {
                let bytes = &b[4 * start..4 * (start + out.len())];
                for (o, w) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f64::from(f32::from_le_bytes([w[0], w[1], w[2], w[3]]));
                }
            }
            _ => out.copy_from_slice(&self[start..start + out.len()]),
        }
    }
}

impl std::ops::Deref for Data {
    type Target = [f64];

    fn deref(&self) -> &[f64] {
        self.0.values.get_or_init(|| {
            let mut v = vec![0.0; self.0.len];
            self.read(0, &mut v);
            v
        })
    }
}

impl From<Vec<f64>> for Data {
    fn from(values: Vec<f64>) -> Data {
        Data(Arc::new(Elements {
            f32_bytes: None,
            len: values.len(),
            values: values.into(),
        }))
    }
}

impl PartialEq for Data {
    fn eq(&self, other: &Data) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The operations of the IR (after canonicalisation: `Gemm` is `MatMul` + `Mul` + `Add`,
/// `Flatten` is `Reshape`, `Constant` is a constant value).
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Matrix product with numpy batching (`[.., m, k] x [.., k, n]`).
    MatMul,
    /// Element-wise `a + b` with numpy broadcasting.
    Add,
    /// Element-wise `a - b`.
    Sub,
    /// Element-wise `a * b`.
    Mul,
    /// Element-wise `a / b` (integer division truncates toward zero).
    Div,
    /// `max(x, 0)`.
    Relu,
    /// An element-wise function of one operand.
    Unary(Unary),
    /// Element-wise `max(a, b)` with numpy broadcasting.
    Max,
    /// Element-wise `min(a, b)` with numpy broadcasting.
    Min,
    /// The input.
    Identity,
    /// The same elements in another shape.
    Reshape {
        /// The output shape.
        shape: Vec<usize>,
    },
    /// Permuted dimensions.
    Transpose {
        /// Output dimension `i` is input dimension `perm[i]`.
        perm: Vec<usize>,
    },
    /// Conversion to another element type.
    Cast {
        /// The target type.
        to: ElemType,
    },
    /// A reduction over `axes` (sorted, distinct); the reduced dimensions
    /// stay as size 1 when `keepdims`.
    Reduce {
        /// What combines the elements.
        kind: ReduceKind,
        /// The reduced dimensions.
        axes: Vec<usize>,
        /// Whether reduced dimensions are kept (as 1).
        keepdims: bool,
    },
    /// `x[start..end]` along each dimension, with a step (ONNX `Slice`
    /// normalised: one entry per dimension, indices clamped; a negative step
    /// walks down from `start` to `end` exclusive).
    Slice {
        /// First index per dimension.
        starts: Vec<i64>,
        /// End (exclusive) per dimension; `-1` means "past index 0" for a negative step.
        ends: Vec<i64>,
        /// Step per dimension (never 0).
        steps: Vec<i64>,
    },
    /// The inputs joined along `axis`.
    Concat {
        /// The joined dimension.
        axis: usize,
    },
    /// `cond ? x : y` element-wise with numpy broadcasting (`cond` boolean).
    Where,
    /// `a < b` element-wise with numpy broadcasting, as 1 or 0 of the
    /// operands' floating-point type (a run-time comparison: ONNX `Less`,
    /// `Greater`, `Equal` become these).
    Less,
    /// `a <= b`, as [`Op::Less`].
    LessOrEqual,
    /// `data` indexed along `axis` by integer `indices` (negative ones count
    /// from the end): the result's shape is `data`'s with dimension `axis`
    /// replaced by the shape of `indices` (ONNX `Gather`).
    Gather {
        /// The indexed dimension of `data`.
        axis: usize,
    },
    /// 2-D convolution of `x [N, C, H, W]` with `w [M, C / groups, KH, KW]`
    /// (and an optional bias `[M]`), into `[N, M, OH, OW]`.
    Conv {
        /// The window's placement.
        window: Window,
        /// Channel groups.
        groups: usize,
    },
    /// 2-D pooling of `x [N, C, H, W]` into `[N, C, OH, OW]`.
    Pool {
        /// Maximum or average.
        kind: PoolKind,
        /// The window's size and placement.
        window: Window,
    },
    /// The windows of a 2-D convolution laid out as rows (an internal step
    /// of the lowering): `x [N, C, H, W]` to `[N, C, KH·KW, OH·OW]`, element
    /// `(n, c, kh·KW + kw, oh·OW + ow)` = `x[n, c, oh·sh + kh·dh - pt, ow·sw +
    /// kw·dw - pl]`, or `fill` where that is outside `x`.
    Im2Col {
        /// The window.
        window: Window,
        /// The value outside the input.
        fill: f64,
    },
    /// The windows of a 2-D convolution as rows of a channels-last image
    /// (an internal step of the lowering): `x [N, H, W, C]` to
    /// `[N, OH·OW, KH·KW·C]`, element `(n, oh·OW + ow, (kh·KW + kw)·C + c)`
    /// = `x[n, oh·sh + kh·dh - pt, ow·sw + kw·dw - pl, c]`, or `fill` where
    /// that is outside `x`. Each window position's channels are a run of one
    /// row of `x`, so the rows move as blocks however the window is shifted.
    Im2Row {
        /// The window.
        window: Window,
        /// The value outside the input.
        fill: f64,
    },
    /// A depthwise 2-D convolution of a channels-last image (an internal
    /// step of the lowering): `x [N, H, W, C]` and constant weights
    /// `w [KH·KW, C]` to `[N, OH·OW, C]`, element `(n, oh·OW + ow, c)` =
    /// the sum over window positions `p = kh·KW + kw` inside `x` of
    /// `x[n, oh·sh + kh·dh - pt, ow·sw + kw·dw - pl, c] · w[p, c]`: each
    /// channel its own window, on the vector units.
    WindowSum {
        /// The window.
        window: Window,
    },
}

/// A 2-D window: kernel size, strides, padding, dilations, and the output
/// size they give.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// `[KH, KW]`.
    pub kernel: [usize; 2],
    /// `[sh, sw]`.
    pub strides: [usize; 2],
    /// `[top, left, bottom, right]`.
    pub pads: [usize; 4],
    /// `[dh, dw]`.
    pub dilations: [usize; 2],
    /// Round the output size up (pooling's `ceil_mode`).
    pub ceil: bool,
}

impl Window {
    /// A 1×1 window with stride 1 and no padding: every output pixel is
    /// its input pixel.
    pub fn is_pointwise(&self) -> bool {
        self.kernel == [1, 1] && self.strides == [1, 1] && self.pads == [0; 4]
    }

    /// The output size `[OH, OW]` over an input of `[H, W]`, if any (never
    /// for a zero kernel, stride or dilation).
    pub fn output(&self, hw: [usize; 2]) -> Option<[usize; 2]> {
        if [self.kernel, self.strides, self.dilations]
            .iter()
            .flatten()
            .any(|x| *x == 0)
        {
            return None;
        }
        let mut out = [0; 2];
        for i in 0..2 {
            let span = self.dilations[i] * (self.kernel[i].checked_sub(1)?) + 1;
            let padded = hw[i] + self.pads[i] + self.pads[i + 2];
            let room = padded.checked_sub(span)?;
            let s = self.strides[i].max(1);
            let mut n = room / s + 1;
            if self.ceil && room % s != 0 {
                n += 1;
                // The last window must start inside the input or the leading padding.
                if (n - 1) * s >= hw[i] + self.pads[i] {
                    n -= 1;
                }
            }
            out[i] = n;
        }
        Some(out)
    }
}

/// What a [`Op::Pool`] computes over a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PoolKind {
    /// The largest element.
    Max,
    /// The mean; padding counts as zeros when `count_include_pad`.
    Average {
        /// Whether padding elements count in the divisor.
        count_include_pad: bool,
    },
}

/// How a [`Op::Reduce`] combines elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// The sum.
    Sum,
    /// The mean.
    Mean,
    /// The largest.
    Max,
    /// The smallest.
    Min,
}

impl ReduceKind {
    /// The ONNX op name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "ReduceSum",
            ReduceKind::Mean => "ReduceMean",
            ReduceKind::Max => "ReduceMax",
            ReduceKind::Min => "ReduceMin",
        }
    }
}

/// The length of `start..end` stepping by `step` (ends as [`Op::Slice`] normalises them).
pub fn slice_len(start: i64, end: i64, step: i64) -> usize {
    let n = if step > 0 {
        (end - start + step - 1).div_euclid(step)
    } else {
        (start - end + (-step) - 1).div_euclid(-step)
    };
    usize::try_from(n.max(0)).unwrap_or(0)
}

/// Element-wise functions of one operand (ONNX op names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unary {
    /// `e^x`
    Exp,
    /// natural logarithm
    Log,
    /// hyperbolic tangent
    Tanh,
    /// the error function
    Erf,
    /// square root
    Sqrt,
    /// `1 / x`
    Reciprocal,
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `1 / (1 + e^-x)`
    Sigmoid,
    /// The nearest integer, halves to even.
    Round,
    /// `1 / sqrt(x)` (no ONNX op: made by instruction selection,
    /// [`crate::passes::select`]).
    Rsqrt,
}

impl Unary {
    /// Every unary op.
    pub const ALL: [Unary; 11] = [
        Unary::Exp,
        Unary::Log,
        Unary::Tanh,
        Unary::Erf,
        Unary::Sqrt,
        Unary::Reciprocal,
        Unary::Neg,
        Unary::Abs,
        Unary::Sigmoid,
        Unary::Round,
        Unary::Rsqrt,
    ];

    /// Whether it is an ONNX op (all but `Rsqrt`, which instruction
    /// selection makes).
    pub fn is_onnx(self) -> bool {
        self != Unary::Rsqrt
    }

    /// The ONNX op name (`Rsqrt`, made by instruction selection, is not one).
    pub fn name(self) -> &'static str {
        match self {
            Unary::Exp => "Exp",
            Unary::Log => "Log",
            Unary::Tanh => "Tanh",
            Unary::Erf => "Erf",
            Unary::Sqrt => "Sqrt",
            Unary::Reciprocal => "Reciprocal",
            Unary::Neg => "Neg",
            Unary::Abs => "Abs",
            Unary::Sigmoid => "Sigmoid",
            Unary::Round => "Round",
            Unary::Rsqrt => "Rsqrt",
        }
    }

    /// The function in `f64` (rounding to the element type is the caller's).
    pub fn eval(self, x: f64) -> f64 {
        match self {
            Unary::Exp => x.exp(),
            Unary::Log => x.ln(),
            Unary::Tanh => x.tanh(),
            Unary::Erf => libm::erf(x),
            Unary::Sqrt => x.sqrt(),
            Unary::Reciprocal => 1.0 / x,
            Unary::Neg => -x,
            Unary::Abs => x.abs(),
            Unary::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Unary::Round => x.round_ties_even(),
            Unary::Rsqrt => 1.0 / x.sqrt(),
        }
    }
}

impl Op {
    /// The name used in dumps and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::MatMul => "MatMul",
            Op::Add => "Add",
            Op::Sub => "Sub",
            Op::Mul => "Mul",
            Op::Div => "Div",
            Op::Relu => "Relu",
            Op::Unary(u) => u.name(),
            Op::Max => "Max",
            Op::Min => "Min",
            Op::Identity => "Identity",
            Op::Reshape { .. } => "Reshape",
            Op::Transpose { .. } => "Transpose",
            Op::Cast { .. } => "Cast",
            Op::Reduce { kind, .. } => kind.name(),
            Op::Slice { .. } => "Slice",
            Op::Concat { .. } => "Concat",
            Op::Where => "Where",
            Op::Less => "Less",
            Op::LessOrEqual => "LessOrEqual",
            Op::Gather { .. } => "Gather",
            Op::Conv { .. } => "Conv",
            Op::Pool {
                kind: PoolKind::Max,
                ..
            } => "MaxPool",
            Op::Pool { .. } => "AveragePool",
            Op::Im2Col { .. } => "Im2Col",
            Op::Im2Row { .. } => "Im2Row",
            Op::WindowSum { .. } => "WindowSum",
        }
    }
}

/// A value's description.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// Its name (the ONNX name where it has one).
    pub name: String,
    /// Its type.
    pub ty: TensorType,
}

/// A node: an op applied to values, producing values.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Its name (the ONNX node name, or one made up from its op and position).
    pub name: String,
    /// The operation.
    pub op: Op,
    /// Operands.
    pub inputs: Vec<ValueId>,
    /// Results.
    pub outputs: Vec<ValueId>,
}

/// A model graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// Every value.
    pub values: Vec<Value>,
    /// Nodes, in topological order.
    pub nodes: Vec<Node>,
    /// Graph inputs, in order.
    pub inputs: Vec<ValueId>,
    /// Graph outputs, in order.
    pub outputs: Vec<ValueId>,
    /// Constant values (initializers and folded results).
    pub constants: BTreeMap<ValueId, Tensor>,
}

impl Graph {
    /// Adds a value.
    pub fn add_value(&mut self, name: impl Into<String>, ty: TensorType) -> ValueId {
        self.values.push(Value {
            name: name.into(),
            ty,
        });
        ValueId(u32::try_from(self.values.len() - 1).unwrap_or(u32::MAX))
    }

    /// Adds a constant value.
    pub fn add_constant(&mut self, name: impl Into<String>, t: Tensor) -> ValueId {
        let id = self.add_value(name, t.ty.clone());
        self.constants.insert(id, t);
        id
    }

    /// Adds a node whose output types are inferred; returns its outputs.
    pub fn add_node(
        &mut self,
        name: impl Into<String>,
        op: Op,
        inputs: Vec<ValueId>,
    ) -> Result<Vec<ValueId>, String> {
        let name = name.into();
        let tys: Vec<TensorType> = inputs
            .iter()
            .map(|v| self.values[v.index()].ty.clone())
            .collect();
        let out_tys =
            infer(&op, &tys).map_err(|e| format!("node `{name}` ({}): {e}", op.name()))?;
        let outputs = out_tys
            .into_iter()
            .enumerate()
            .map(|(i, ty)| self.add_value(format!("{name}:{i}"), ty))
            .collect::<Vec<_>>();
        self.nodes.push(Node {
            name,
            op,
            inputs,
            outputs: outputs.clone(),
        });
        Ok(outputs)
    }

    /// A value's type.
    pub fn ty(&self, v: ValueId) -> &TensorType {
        &self.values[v.index()].ty
    }
}

#[cfg(test)]
mod tests {
    use super::{ElemType, Tensor, TensorType};

    /// A tensor kept as `f32` bytes reads the values a decoded one holds,
    /// element by element, by ranges and as a slice, and compares equal.
    #[test]
    fn f32_bytes_read_as_their_values() {
        let values = [1.5f32, -0.0, f32::MIN_POSITIVE / 4.0, 3.0e38, -7.25, 0.1];
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let lazy = Tensor::f32_bytes(vec![2, 3], bytes.into());
        let ty = TensorType {
            elem: ElemType::F32,
            shape: vec![2, 3],
        };
        let eager = Tensor::new(ty, values.iter().map(|v| f64::from(*v)).collect());
        assert_eq!(lazy.data.len(), 6);
        for i in 0..6 {
            assert_eq!(lazy.data.at(i).to_bits(), eager.data[i].to_bits());
        }
        let mut row = [0.0; 3];
        lazy.data.read(3, &mut row);
        assert_eq!(row, eager.data[3..]);
        assert_eq!(lazy, eager);
        assert_eq!(lazy.data.at(1).to_bits(), (-0.0f64).to_bits());
    }
}
