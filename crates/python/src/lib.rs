//! `credit._credit`: the Python extension module behind `import credit`.
//!
//! Tables come in through the Arrow PyCapsule stream interface (`__arrow_c_stream__`: pyarrow
//! Tables and RecordBatchReaders, polars and pandas DataFrames) and go out the same way (the Python
//! side wraps them with `pyarrow.table`). Every function is a run of `credit_core::run`, the one
//! the CLI makes: the same ingest (window by window, in bounded memory), the same plan (preset <
//! parameters), the same methods and analyses, the same errors.
//!
//! A table is ingested from a temporary Parquet file that the Python side writes, read as the CLI
//! reads a Parquet log, so aliases, checks and messages are the CLI's.

use anyhow::{Context, Result};
use credit_core::analyses::compare::{compare, CompareRows};
use credit_core::ingest::{IngestOptions, UnitKind, DEFAULT_SUCCESS_THRESHOLD};
use credit_core::methods::Advantages;
use credit_core::plan::{ParamValue, Plan, Setting, ADVANTAGES, COMPARE, REPORT};
use credit_core::profile::Profile;
use credit_core::run::{concat, take_rows, Finished, Logged, Rows, RunPlan};
use credit_core::schema::ColumnMap;
use credit_core::StepBatch;
use polars::prelude::*;
use polars_arrow::array::StructArray;
use polars_arrow::ffi::{export_iterator, ArrowArrayStream, ArrowArrayStreamReader};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use std::path::PathBuf;

pyo3::create_exception!(
    credit,
    CreditError,
    PyValueError,
    "A bad input, parameter or file: the message is the CLI's (file, line or row, column); \
     `location` (file, line, column, …) and `reason` are those of its JSON error, or None."
);

// ---------------------------------------------------------------------------------------------
// Arrow in and out

/// A table from any object with `__arrow_c_stream__`. Numeric columns are not copied.
fn df_from_arrow_stream(obj: &Bound<'_, PyAny>) -> PyResult<DataFrame> {
    if !obj.hasattr("__arrow_c_stream__")? {
        return Err(PyTypeError::new_err(
            "expected a pyarrow.Table, a polars.DataFrame or another object with __arrow_c_stream__",
        ));
    }
    let capsule = obj
        .call_method0("__arrow_c_stream__")?
        .cast_into::<PyCapsule>()?;
    let ptr = capsule
        .pointer_checked(Some(c"arrow_array_stream"))?
        .as_ptr() as *mut ArrowArrayStream;
    // Move the stream out, leaving a released one so that the capsule's destructor does nothing.
    let stream = Box::new(unsafe { std::ptr::replace(ptr, ArrowArrayStream::empty()) });
    let mut reader = unsafe { ArrowArrayStreamReader::try_new(stream) }.map_err(polars_err)?;
    let fields = match reader.field().dtype() {
        ArrowDataType::Struct(fields) => fields.clone(),
        other => {
            return Err(PyTypeError::new_err(format!(
                "expected a table stream, got {other:?}"
            )))
        }
    };
    let mut chunks: Vec<Vec<ArrayRef>> = vec![Vec::new(); fields.len()];
    while let Some(batch) = unsafe { reader.next() } {
        let batch = batch.map_err(polars_err)?;
        let batch = batch
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| PyTypeError::new_err("a stream batch is not a struct array"))?;
        for (dst, arr) in chunks.iter_mut().zip(batch.values()) {
            dst.push(arr.clone());
        }
    }
    let columns = fields
        .iter()
        .zip(chunks)
        .map(|(field, chunks)| {
            let s = if chunks.is_empty() {
                Series::new_empty(field.name.clone(), &DataType::from_arrow_field(field))
            } else {
                Series::try_from((field, chunks))
                    .map_err(|e| CreditError::new_err(format!("column `{}`: {e}", field.name)))?
            };
            Ok(s.into_column())
        })
        .collect::<PyResult<Vec<Column>>>()?;
    DataFrame::new_infer_height(columns).map_err(polars_err)
}

/// A DataFrame as an Arrow C stream (one struct array per aligned chunk).
fn df_to_stream(df: &DataFrame, compat: CompatLevel) -> ArrowArrayStream {
    let mut df = df.clone();
    df.align_chunks_par();
    let dtype = ArrowDataType::Struct(df.schema().to_arrow(compat).into_iter_values().collect());
    let field = ArrowField::new(PlSmallStr::EMPTY, dtype.clone(), false);
    let height = df.height();
    let n_chunks = if df.width() == 0 {
        usize::from(height > 0)
    } else {
        df.first_col_n_chunks()
    };
    let columns: Vec<Series> = df
        .columns()
        .iter()
        .map(|c| c.as_materialized_series().clone())
        .collect();
    let iter = (0..n_chunks).map(move |i| {
        let arrays: Vec<ArrayRef> = columns.iter().map(|s| s.to_arrow(i, compat)).collect();
        let len = arrays.first().map_or(height, |a| a.len());
        Ok(Box::new(StructArray::new(dtype.clone(), len, arrays, None)) as ArrayRef)
    });
    export_iterator(Box::new(iter), field)
}

/// A table handed to Python: `pyarrow.table(obj)` reads it through `__arrow_c_stream__`.
/// Strings go out as `large_string` (Ray Data's shuffles cannot take `string_view`).
#[pyclass(frozen, module = "credit._credit")]
struct ArrowTable {
    df: DataFrame,
}

#[pymethods]
impl ArrowTable {
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // best effort, as the PyCapsule interface allows
        PyCapsule::new_with_value(
            py,
            df_to_stream(&self.df, CompatLevel::oldest()),
            c"arrow_array_stream",
        )
    }
}

fn polars_err(e: PolarsError) -> PyErr {
    CreditError::new_err(e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Inputs

/// The keywords every function takes (the Python side passes them by name; absent ones take the
/// CLI's defaults): which methods under which preset and parameters, and how to read the logs
/// (`--schema`, `--lenient`, `--success-threshold`).
struct Options {
    methods: Option<String>,
    preset: Option<String>,
    params: Vec<(String, String)>,
    schema_file: Option<PathBuf>,
    columns: Vec<(String, String)>,
    lenient: bool,
    success_threshold: f64,
}

impl Options {
    const KEYWORDS: [&str; 7] = [
        "methods",
        "preset",
        "params",
        "schema_file",
        "columns",
        "lenient",
        "success_threshold",
    ];

    fn from_kwargs(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
        if let Some(kwargs) = kwargs {
            for key in kwargs.keys() {
                let key: String = key.extract()?;
                if !Self::KEYWORDS.contains(&key.as_str()) {
                    return Err(PyTypeError::new_err(format!(
                        "unexpected keyword `{key}` (expected one of {})",
                        Self::KEYWORDS.join(", ")
                    )));
                }
            }
        }
        let item = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
            Ok(match kwargs {
                Some(kwargs) => kwargs.get_item(key)?.filter(|v| !v.is_none()),
                None => None,
            })
        };
        fn get<'py, T: for<'a> FromPyObject<'a, 'py>>(
            value: Option<Bound<'py, PyAny>>,
        ) -> PyResult<Option<T>> {
            value
                .map(|v| v.extract::<T>().map_err(Into::into))
                .transpose()
        }
        Ok(Options {
            methods: get(item("methods")?)?,
            preset: get(item("preset")?)?,
            params: get(item("params")?)?.unwrap_or_default(),
            schema_file: get(item("schema_file")?)?,
            columns: get(item("columns")?)?.unwrap_or_default(),
            lenient: get(item("lenient")?)?.unwrap_or(false),
            success_threshold: get(item("success_threshold")?)?
                .unwrap_or(DEFAULT_SUCCESS_THRESHOLD),
        })
    }

    /// The run: `source` (a list of paths) read as the CLI reads logs, the methods of `methods`
    /// (else `default_methods`; none when that is `None`) under `preset` (else the CLI's
    /// default) and `params`.
    fn run(&self, source: &Bound<'_, PyAny>, default_methods: Option<&str>) -> PyResult<RunPlan> {
        let paths: Vec<PathBuf> = source.extract().map_err(|_| {
            PyTypeError::new_err(
                "expected a list of paths (tables go through `credit.advantages` & co.)",
            )
        })?;
        let plan = || -> Result<RunPlan> {
            let params: Vec<Setting> = self
                .params
                .iter()
                .map(|(k, v)| (k.trim().to_string(), ParamValue::Text(v.trim().to_string())))
                .collect();
            let profile = self.profile()?;
            let ingest = self.ingest()?;
            let methods = match default_methods {
                Some(default) => {
                    let list = self.methods.as_deref().unwrap_or(default);
                    let list = reading(
                        credit_core::plan::for_logs(list, &paths, &ingest).map_err(Into::into),
                    )?;
                    Plan::new(profile, &list, &params)?
                }
                None => Plan::empty(profile),
            };
            Ok(RunPlan {
                paths,
                ingest,
                methods,
                hisr: Plan::hisr(profile, &params)?,
                against: None,
            })
        };
        plan().map_err(to_py)
    }

    fn profile(&self) -> Result<Profile> {
        match &self.preset {
            Some(preset) => preset.parse().map_err(anyhow::Error::msg),
            None => Ok(Profile::default()),
        }
    }

    /// `--schema` (a mapping file, then pairs that override it), `--lenient`,
    /// `--success-threshold`.
    fn ingest(&self) -> Result<IngestOptions> {
        let mut map = ColumnMap::default();
        if let Some(path) = &self.schema_file {
            for (source, target) in credit_core::ingest::read_column_map(path)? {
                map.origins
                    .insert(source.clone(), path.display().to_string());
                map.user.insert(source, target);
            }
        }
        for (source, target) in &self.columns {
            map.origins.remove(source);
            map.user.insert(source.clone(), target.clone());
        }
        Ok(IngestOptions::new(
            map,
            self.lenient,
            self.success_threshold,
        )?)
    }
}

/// The error as `CreditError`, with the `location` and `reason` the CLI's JSON error gives bad
/// input (None otherwise).
fn to_py(err: anyhow::Error) -> PyErr {
    let located = err
        .chain()
        .find_map(|e| e.downcast_ref::<credit_core::Error>())
        .and_then(|e| match e {
            credit_core::Error::Input {
                location, reason, ..
            } => Some((
                serde_json::to_string(location).ok()?,
                serde_json::to_value(reason).ok()?.as_str()?.to_string(),
            )),
            _ => None,
        });
    let py_err = CreditError::new_err(format!("{err:#}"));
    Python::attach(|py| {
        let value = py_err.value(py);
        let (location, reason) = match located {
            Some((location, reason)) => {
                let json = py.import("json")?;
                (
                    json.call_method1("loads", (location,))?.unbind(),
                    reason.into_pyobject(py)?.into_any().unbind(),
                )
            }
            None => (py.None(), py.None()),
        };
        value.setattr("location", location)?;
        value.setattr("reason", reason)
    })
    .map_or_else(|e| e, |()| py_err)
}

/// A run's error as the CLI says it: one of reading the logs.
fn reading<T>(run: Result<T>) -> Result<T> {
    run.context("reading the logs")
}

/// A run's notes and ingest's report, as the metadata the CLI writes (JSON).
fn notes_and_report<T>(finished: &Finished<T>) -> serde_json::Value {
    serde_json::json!({ "notes": finished.notes, "report": finished.report })
}

// ---------------------------------------------------------------------------------------------
// Functions

/// The logs as one table of canonical columns (what every method reads).
#[pyfunction]
#[pyo3(signature = (source, **options))]
fn read_logs(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(ArrowTable, String)> {
    let run = Options::from_kwargs(options)?.run(source, None)?;
    let finished = py
        .detach(|| {
            reading(run.frames(UnitKind::Group, &|_| {}, |w| {
                Ok::<_, anyhow::Error>((w.batch.frame().clone(), Vec::new()))
            }))
        })
        .map_err(to_py)?;
    Ok((
        ArrowTable {
            df: finished.value.clone().unwrap_or_default(),
        },
        notes_and_report(&finished).to_string(),
    ))
}

/// `credit advantages`: keys then every method's columns, rows in input order; and the metadata.
#[pyfunction]
#[pyo3(signature = (source, **options))]
fn advantages(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(ArrowTable, String)> {
    let run = Options::from_kwargs(options)?.run(source, Some(ADVANTAGES))?;
    let (frame, finished) = py
        .detach(|| -> Result<_> {
            let mut parts = Vec::new();
            let finished = reading(run.advantages(&Logged, &|_| {}, |rows| {
                match rows {
                    Rows::Rows(rows, selection) => parts.push(take_rows(rows.frame(), selection)?),
                    Rows::Restart => parts.clear(),
                }
                Ok::<_, anyhow::Error>(())
            }))?;
            Ok((concat(parts)?, finished))
        })
        .map_err(to_py)?;
    Ok((
        ArrowTable {
            df: frame.unwrap_or_default(),
        },
        run.methods.metadata(&finished.notes).to_string(),
    ))
}

/// `credit analyze --format json`.
#[pyfunction]
#[pyo3(signature = (source, **options))]
fn analyze(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    // Only HISR's segmenter is read (the summary's segment statistics): no methods run.
    let run = Options::from_kwargs(options)?.run(source, None)?;
    py.detach(|| -> Result<String> {
        let finished = reading(run.summary(&Logged, &[], &|_| {}))?;
        Ok(serde_json::to_string(&finished.value)?)
    })
    .map_err(to_py)
}

/// What `compare` keeps of each row, as a table: `_seq`, `valid`, `success`, `position`, `task`
/// (when logged), then one advantage column per method (`credit.ray.compare` gathers these).
fn compare_frame(
    batch: &StepBatch,
    seq: &[u64],
    results: &[Advantages],
    labels: &[String],
) -> Result<DataFrame> {
    let mut columns = vec![
        Column::new("_seq".into(), seq),
        Column::new("valid".into(), batch.valid()),
        Column::new(
            "success".into(),
            batch
                .traj_of_row
                .iter()
                .map(|&t| batch.trajs[t as usize].success)
                .collect::<Vec<bool>>(),
        ),
        Column::new("position".into(), &batch.position),
    ];
    if let Some(tasks) = batch.tasks() {
        columns.push(
            tasks
                .clone()
                .into_series()
                .with_name("task".into())
                .into_column(),
        );
    }
    for (label, result) in labels.iter().zip(results) {
        columns.push(Column::new(label.as_str().into(), result.advantage()));
    }
    Ok(DataFrame::new(batch.len(), columns)?)
}

/// `credit compare --format json` (`compact = false`), or the compact rows of
/// [`compare_frame`] and the metadata (`compact = true`).
#[pyfunction]
#[pyo3(signature = (source, compact = false, **options))]
fn compare_logs(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    compact: bool,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(Option<ArrowTable>, String)> {
    let run = Options::from_kwargs(options)?.run(source, Some(COMPARE))?;
    let labels = run.methods.labels();
    if compact {
        let finished = py
            .detach(|| {
                reading(run.frames(run.methods.unit(), &|_| {}, |window| {
                    let computed = run.compute(&Logged, window)?;
                    let frame =
                        compare_frame(&computed.batch, &window.seq, &computed.results, &labels)?;
                    Ok::<_, anyhow::Error>((frame, computed.notes))
                }))
            })
            .map_err(to_py)?;
        return Ok((
            Some(ArrowTable {
                df: finished.value.clone().unwrap_or_default(),
            }),
            run.methods.metadata(&finished.notes).to_string(),
        ));
    }
    let json = py
        .detach(|| -> Result<String> {
            let finished = reading(run.gather(
                &Logged,
                false,
                &|_| {},
                |_, _, _| Ok(()),
                |_| Ok::<_, anyhow::Error>(()),
            ))?;
            let gathered = &finished.value;
            let mut value = serde_json::to_value(gathered.compare())?;
            value["metadata"] = run.methods.metadata(&finished.notes);
            Ok(value.to_string())
        })
        .map_err(to_py)?;
    Ok((None, json))
}

/// The comparison of compact rows ([`compare_frame`], already in input order) gathered from
/// shards; `metadata` is the JSON text to attach.
#[pyfunction]
fn compare_rows(
    py: Python<'_>,
    table: &Bound<'_, PyAny>,
    labels: Vec<String>,
    metadata: String,
) -> PyResult<String> {
    let df = df_from_arrow_stream(table)?;
    py.detach(|| -> Result<String> {
        let bools = |name: &str| -> Result<Vec<bool>> {
            Ok(df
                .column(name)?
                .bool()?
                .downcast_iter()
                .flat_map(|a| a.iter())
                .map(|v| v.unwrap_or(false))
                .collect())
        };
        let mut rows = CompareRows::default();
        rows.valid = bools("valid")?;
        rows.success = bools("success")?;
        rows.position = df
            .column("position")?
            .cast(&DataType::UInt32)?
            .u32()?
            .into_no_null_iter()
            .collect();
        if let Ok(task) = df.column("task") {
            let task = task.cast(&DataType::String)?;
            let mut index: std::collections::HashMap<String, u32> = Default::default();
            let mut ids = Vec::with_capacity(df.height());
            for name in task.str()?.downcast_iter().flat_map(|a| a.iter()) {
                let name = name.unwrap_or("(none)");
                let id = match index.get(name) {
                    Some(&id) => id,
                    None => {
                        rows.task_names.push(name.to_string());
                        let id = (rows.task_names.len() - 1) as u32;
                        index.insert(name.to_string(), id);
                        id
                    }
                };
                ids.push(id);
            }
            rows.task = Some(ids);
        }
        let mut advantages = Vec::new();
        for label in &labels {
            let values: Vec<f64> = df
                .column(label)?
                .cast(&DataType::Float64)?
                .f64()?
                .into_no_null_iter()
                .collect();
            advantages.push((label.clone(), values));
        }
        let mut value = serde_json::to_value(compare(&rows, &advantages))?;
        value["metadata"] = serde_json::from_str(&metadata)?;
        Ok(value.to_string())
    })
    .map_err(to_py)
}

/// `credit report`: the report folder `out` (report.html, report.md, summary.json, figures/),
/// under the CLI's output rule; returns summary.json's text. `check` is a thresholds file,
/// `baseline` an earlier summary.json's text.
#[pyfunction]
#[pyo3(signature = (source, out, check = None, baseline = None, explore = Vec::new(), explore_max = 12, **options))]
#[allow(clippy::too_many_arguments)]
fn report(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    out: PathBuf,
    check: Option<PathBuf>,
    baseline: Option<String>,
    explore: Vec<String>,
    explore_max: usize,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let run = Options::from_kwargs(options)?.run(source, Some(REPORT))?;
    py.detach(|| -> Result<String> {
        let options = credit_report::run::Options {
            rules: check
                .as_deref()
                .map(credit_report::run::read_rules)
                .transpose()?,
            baseline: baseline
                .map(|text| serde_json::from_str(&text).context("baseline: not a summary.json"))
                .transpose()?,
            explore,
            explore_max,
        };
        let mut read = credit_output::Inputs::new(&run.paths);
        read.add_file_ids(
            credit_core::ingest::input_file_ids(&run.paths).context("reading the logs")?,
        );
        if let Some(path) = &check {
            read.add(path);
        }
        credit_output::OutputDir::check(&out, "report", &read)?;
        let finished = reading(credit_report::run::gather(&run, &Logged, &options, &|_| {}))?;
        credit_report::run::write(
            &out,
            &read,
            &run,
            &finished.value,
            &finished.notes,
            &options,
            true,
        )?;
        Ok(std::fs::read_to_string(out.join("summary.json"))?)
    })
    .map_err(to_py)
}

/// `credit.metrics`: the report's headline figures and each pair of methods' Spearman ρ on the
/// rows of `source`, as flat keys (JSON text); the report's own reading, without its folder.
#[pyfunction]
#[pyo3(signature = (source, **options))]
fn metrics(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<String> {
    let run = Options::from_kwargs(options)?.run(source, Some(REPORT))?;
    py.detach(|| -> Result<String> {
        let options = credit_report::run::Options {
            rules: None,
            baseline: None,
            explore: Vec::new(),
            explore_max: 0,
        };
        let finished = reading(credit_report::run::gather(&run, &Logged, &options, &|_| {}))?;
        Ok(serde_json::to_string(&finished.value.metrics())?)
    })
    .map_err(to_py)
}

/// (unit, method labels) of the plan `command` (`advantages` or `compare`, whose default methods
/// apply) makes of the keywords: `unit` is `group` when every method is group-local, else
/// `iteration` (ProxMO, MGR, SPA, HISR, EMPG read the whole training batch).
#[pyfunction]
#[pyo3(signature = (command, **options))]
fn plan_info(
    py: Python<'_>,
    command: &str,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(String, Vec<String>)> {
    let default_methods = match command {
        "advantages" => ADVANTAGES,
        "compare" => COMPARE,
        other => {
            return Err(PyTypeError::new_err(format!(
                "unknown command `{other}` (expected advantages or compare)"
            )))
        }
    };
    let source = pyo3::types::PyList::empty(py);
    let run = Options::from_kwargs(options)?.run(&source, Some(default_methods))?;
    let unit = match run.methods.unit() {
        UnitKind::Group => "group",
        _ => "iteration",
    };
    Ok((unit.to_string(), run.methods.labels()))
}

/// The log column names ingest accepts for a canonical field (the name itself first).
#[pyfunction]
fn aliases(field: &str) -> PyResult<Vec<String>> {
    let f = credit_core::schema::field(field)
        .ok_or_else(|| CreditError::new_err(format!("unknown field `{field}`")))?;
    let mut out = vec![f.name.to_string()];
    out.extend(f.aliases().filter(|a| *a != f.name).map(str::to_string));
    Ok(out)
}

#[pymodule]
fn _credit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CreditError", m.py().get_type::<CreditError>())?;
    m.add_class::<ArrowTable>()?;
    m.add_function(wrap_pyfunction!(read_logs, m)?)?;
    m.add_function(wrap_pyfunction!(advantages, m)?)?;
    m.add_function(wrap_pyfunction!(analyze, m)?)?;
    m.add_function(wrap_pyfunction!(compare_logs, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_function(wrap_pyfunction!(metrics, m)?)?;
    m.add_function(wrap_pyfunction!(compare_rows, m)?)?;
    m.add_function(wrap_pyfunction!(plan_info, m)?)?;
    m.add_function(wrap_pyfunction!(aliases, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
