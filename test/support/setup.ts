// aws-local-stepfunctions uses Promise.withResolvers, which Node 20 lacks.
import '../../infra/local/polyfills.js';
