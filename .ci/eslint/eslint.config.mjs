// ESLint's recommended rules, and a few more, for the explorer's script (a classic browser script: plotly.js and
// the page data come before it in the same page). tests/test_explorer.py runs
//   .ci/eslint/node_modules/.bin/eslint --config .ci/eslint/eslint.config.mjs src/beliefdrift/report/templates/
import js from "@eslint/js";

const browser = Object.fromEntries(["atob", "CustomEvent", "DataView", "document", "Event", "ResizeObserver", "window"]
  .map(name => [name, "readonly"]));

export default [
  js.configs.recommended,
  {
    files: ["**/*.js"],
    languageOptions: {ecmaVersion: 2022, sourceType: "script", globals: browser},
    rules: {
      "eqeqeq": "error",
      "no-var": "error",
      "prefer-const": "error",
      "no-shadow": "error",
      "no-unused-vars": ["error", {args: "after-used"}],
    },
  },
];
