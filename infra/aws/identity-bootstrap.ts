/**
 * The identity every deployed stack starts with (functions/identity/bootstrap.ts): CloudFormation
 * generates the admin's first password into a Secrets Manager secret, and a custom resource runs the
 * wiring's identity `deploy` function with the secret's ARN, on create and on every deploy that
 * changes what it is given. The function is the resource's service token itself (it answers
 * CloudFormation's response URL), so the stack gains no Provider framework Lambda for it. Only that
 * function may read the secret.
 */
import { CfnOutput, CustomResource, Validations, type RemovalPolicy, type Stack } from 'aws-cdk-lib';
import type { IFunction } from 'aws-cdk-lib/aws-lambda';
import { Secret } from 'aws-cdk-lib/aws-secretsmanager';
import { BOOTSTRAP_IDENTITY, IDENTITY_PROPERTY, SECRET_ARN_PROPERTY, SECRET_PASSWORD_KEY } from '../../functions/identity/bootstrap.js';

/** The stack output naming the secret (docs/aws.md: how to read the password). */
export const ADMIN_SECRET_OUTPUT = 'AdminPasswordSecretArn';
export const IDENTITY_RESOURCE_TYPE = 'Custom::FerryIdentity';
/** Length of the generated password; letters and digits only, so it needs no quoting in a shell or in clouds.yaml. */
export const ADMIN_PASSWORD_LENGTH = 32;

export interface IdentityBootstrap {
  readonly secret: Secret;
  readonly resource: CustomResource;
}

/**
 * @param onEvent the wiring's `deploy` function with `deployResource: 'identity'`
 * @param removalPolicy the secret's, the same as the tables': the password lives as long as the user it was made for
 */
export function addIdentityBootstrap(stack: Stack, onEvent: IFunction, removalPolicy: RemovalPolicy): IdentityBootstrap {
  const secret = new Secret(stack, 'AdminPassword', {
    description: `First password of the Keystone user ${BOOTSTRAP_IDENTITY.user} (role admin on project ${BOOTSTRAP_IDENTITY.project}) of this Ferry stack. Changing the user's password does not change this secret.`,
    generateSecretString: {
      secretStringTemplate: JSON.stringify({ username: BOOTSTRAP_IDENTITY.user }),
      generateStringKey: SECRET_PASSWORD_KEY,
      passwordLength: ADMIN_PASSWORD_LENGTH,
      excludePunctuation: true,
    },
    removalPolicy,
  });
  Validations.of(secret).acknowledge({
    id: 'AwsSolutions-SMG4',
    reason: 'The secret holds the admin user\'s first password only; the password itself is kept (hashed) by the identity service, so rotating the secret would change nothing but make it wrong. Users change passwords through Keystone\'s API.',
  });
  secret.grantRead(onEvent);

  const resource = new CustomResource(stack, 'IdentityBootstrap', {
    serviceToken: onEvent.functionArn,
    resourceType: IDENTITY_RESOURCE_TYPE,
    properties: { [SECRET_ARN_PROPERTY]: secret.secretArn, [IDENTITY_PROPERTY]: JSON.stringify(BOOTSTRAP_IDENTITY) },
  });
  new CfnOutput(stack, ADMIN_SECRET_OUTPUT, {
    value: secret.secretArn,
    description: `Secret with the first password of the identity user ${BOOTSTRAP_IDENTITY.user}: aws secretsmanager get-secret-value --secret-id <this> --query SecretString`,
  });
  return { secret, resource };
}
