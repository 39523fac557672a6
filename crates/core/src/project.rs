//! `credit.toml` (project defaults) and `--schema map.toml` (column mapping), and how they combine
//! with flags: preset < `credit.toml` < flags.

use crate::error::{Error, Result};
use crate::plan::{ParamValue, Setting};
use crate::schema::ColumnMap;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The project file. Every key has a flag of the same name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectFile {
    /// Input paths, relative to the file's folder.
    #[serde(default)]
    pub inputs: Vec<PathBuf>,
    pub preset: Option<crate::profile::Profile>,
    pub methods: Option<Vec<String>>,
    pub success_threshold: Option<f64>,
    pub invalid_penalty: Option<f64>,
    pub gamma: Option<f64>,
    pub seed: Option<u64>,
    /// source column → canonical column.
    #[serde(default)]
    pub columns: BTreeMap<String, String>,
    /// `"gigpo.omega" = 0.5`, or a table per method: `[params.gigpo] omega = 0.5`.
    #[serde(default)]
    pub params: BTreeMap<String, toml::Value>,
    /// Where the file was found (set after reading).
    #[serde(skip)]
    pub dir: PathBuf,
}

impl ProjectFile {
    /// Reads `path`, or `./credit.toml` when it exists and no path is given.
    pub fn load(path: Option<&Path>) -> Result<ProjectFile> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None if Path::new("credit.toml").is_file() => PathBuf::from("credit.toml"),
            None => {
                return Ok(ProjectFile {
                    dir: PathBuf::from("."),
                    ..Default::default()
                })
            }
        };
        let text = crate::ingest::read_settings(&path)?;
        let mut file: ProjectFile =
            toml::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        file.dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if file.dir.as_os_str().is_empty() {
            file.dir = PathBuf::from(".");
        }
        Ok(file)
    }

    /// The input paths: the command line's, else the file's, else `./logs`.
    pub fn inputs(&self, given: &[PathBuf]) -> Vec<PathBuf> {
        if !given.is_empty() {
            given.to_vec()
        } else if !self.inputs.is_empty() {
            self.inputs.iter().map(|p| self.dir.join(p)).collect()
        } else {
            vec![PathBuf::from("logs")]
        }
    }

    /// `method.param` → value, from `[params]` (TOML's types kept).
    pub fn param_settings(&self) -> Result<Vec<Setting>> {
        let mut out = Vec::new();
        for (key, value) in &self.params {
            match value {
                toml::Value::Table(table) => {
                    for (k, v) in table {
                        out.push((format!("{key}.{k}"), param_value(v)?));
                    }
                }
                v => out.push((key.clone(), param_value(v)?)),
            }
        }
        Ok(out)
    }
}

fn param_value(v: &toml::Value) -> Result<ParamValue> {
    Ok(match v {
        toml::Value::String(s) => ParamValue::Text(s.clone()),
        toml::Value::Integer(i) => match u64::try_from(*i) {
            Ok(n) => ParamValue::Integer(n),
            Err(_) => ParamValue::Number(*i as f64),
        },
        toml::Value::Float(f) => ParamValue::Number(*f),
        toml::Value::Boolean(b) => ParamValue::Bool(*b),
        other => {
            return Err(Error::Config(format!(
                "credit.toml [params]: unsupported value {other}"
            )))
        }
    })
}

/// The column mapping: `credit.toml`'s `[columns]`, then `--schema map.toml` on top. A schema file
/// is either a `[columns]` table or top-level `source = "canonical"` pairs.
pub fn column_map(project: &ProjectFile, schema: Option<&Path>) -> Result<ColumnMap> {
    let mut map = ColumnMap {
        user: project.columns.clone(),
        origins: project
            .columns
            .keys()
            .map(|source| (source.clone(), "credit.toml [columns]".to_string()))
            .collect(),
    };
    if let Some(path) = schema {
        for (source, target) in crate::ingest::read_column_map(path)? {
            map.origins
                .insert(source.clone(), path.display().to_string());
            map.user.insert(source, target);
        }
    }
    Ok(map)
}
